"""``syshax advise`` on traffic a running daemon recorded: the advice for the recorded
window, as JSON and in the daemon.

The box: two ``tiny`` simulated engines at an eighth of their speed (decode steps of ~80 ms,
wall clock) under ``classic``, 120 streamed requests at 3/s: the GPU's 8 slots overflow and
the CPU takes a good share. How close advise's prediction comes to what happened (TTFT p50
and throughput within 20%) compares wall-clock figures: that is stage 3 of
``python bench/accuracy.py`` (the same box and workload), run on a quiet machine. Here the
prediction is held only to what the model itself guarantees, whatever the machine's speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import httpx
import pytest

from bench._accuracy_advise import BOX, LOAD
from sim import timing
from sim.profile import load_profile
from syshaxd.schema import AdviceModel
from tests.advise.traffic import advice_of, drive
from tests.plugins.stack import Stack

#: The recording drives 40 s of traffic through a stack started for it, then runs advise: on a
#: busy machine that takes longer than the suite's default bound for a hung test.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def recorded(make_module_stack: Callable[..., Stack]) -> tuple[Stack, AdviceModel]:
    """The stack after the workload, and its advice (``--json``)."""
    stack = make_module_stack(policy=BOX.policy, gpu_profile=BOX.gpu_profile, cpu_profile=BOX.cpu_profile,
                              speed=BOX.speed)
    ok = drive(stack, LOAD)
    assert all(ok), f"{ok.count(False)} of {len(ok)} requests failed"
    # ``--force``: these tests read the replay and the trimmed window, not the self-check, which
    # may refuse on a machine busy enough to slow the engines' wall clock (tests/advise/test_refusal.py).
    return stack, advice_of(stack, "--force")


def test_the_advice_replays_the_window_under_the_current_setting_and_reports_its_error(
        recorded: tuple[Stack, AdviceModel]) -> None:
    _, advice = recorded
    assert advice.requests == LOAD.requests
    current = [o for o in advice.options if o.current]
    assert len(current) == 1 and current[0].settings["decider.policy"] == "classic"
    assert current[0].cpu_share > 0.2  # the window exercised both engines
    print(f"current setting error: {advice.current_error}")
    assert all(math.isfinite(advice.current_error[k]) for k in ("ttft_p50", "throughput")), advice.current_error
    # Every first token takes at least the shortest prompt's prefill step on the engines'
    # clock, an eighth of real time here: a replay that forgot the speed predicts 8x less.
    floor = timing.prefill_time(load_profile(BOX.gpu_profile), LOAD.prompt[0]) / BOX.speed
    assert current[0].ttft_p50 is not None and current[0].ttft_p50 >= floor, (current[0].ttft_p50, floor)


def test_json_is_the_advice_the_daemon_keeps_and_last_n_trims_the_window(
        recorded: tuple[Stack, AdviceModel]) -> None:
    stack, _ = recorded
    trimmed = advice_of(stack, "--last", "50", "--force")
    assert trimmed.requests == 50
    assert {o.settings["decider.policy"] for o in trimmed.options} == {"gpu-only", "classic", "adaptive"}
    assert trimmed.recommended is not None and trimmed.summary
    assert trimmed.profiles == {"gpu": "tiny", "cpu": "tiny"}
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        kept = AdviceModel.model_validate(control.get("/v1/advice").raise_for_status().json())
    assert kept == trimmed
