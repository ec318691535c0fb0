"""``syshax advise`` on traffic a running daemon recorded: its prediction for the current
setting against what really happened on the same window, the advice as JSON and in the daemon.

The box: two ``tiny`` simulated engines at an eighth of their speed (decode steps of ~80 ms,
prompts of 50-400 tokens in ~40-160 ms per 100 tokens, wall clock) under ``classic``, 120
streamed requests at 3/s: the GPU's 8 slots overflow and the CPU takes a good share. The
same box and workload are stage 3 of ``python bench/accuracy.py``, which measures issue 24's
20% figure on a quiet machine; here the bounds hold beside the rest of the suite.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from bench._accuracy_advise import LOAD
from syshaxd.schema import AdviceModel
from tests.advise.traffic import advice_of, drive
from tests.plugins.stack import Stack

#: The Done-when bound of issue 24, for throughput (it follows the arrivals: robust on a busy machine).
BOUND = 0.20
#: TTFT p50 is compared with live engines that share two cores with the rest of the suite:
#: measured alone it is within 20% (-10% on this workload), beside the suite's reliability
#: tests it has come out 25-30% low. The test holds it to a bound that still catches a wrong
#: model (a missing speed conversion is off by 4x); the 20% figure is bench/accuracy.py's.
TTFT_BOUND_IN_SUITE = 0.5


@pytest.fixture(scope="module")
def recorded(make_module_stack: Callable[..., Stack]) -> tuple[Stack, AdviceModel]:
    """The stack after the workload, and its advice (``--json``)."""
    stack = make_module_stack(policy="classic", gpu_profile="tiny", cpu_profile="tiny", speed=0.125)
    ok = drive(stack, LOAD)
    assert all(ok), f"{ok.count(False)} of {len(ok)} requests failed"
    return stack, advice_of(stack)


def test_the_current_settings_prediction_is_close_to_what_happened(
        recorded: tuple[Stack, AdviceModel]) -> None:
    _, advice = recorded
    assert advice.requests == LOAD.requests
    current = [o for o in advice.options if o.current]
    assert len(current) == 1 and current[0].settings["decider.policy"] == "classic"
    assert current[0].cpu_share > 0.2  # the window exercised both engines
    err = advice.current_error
    print(f"current setting error: {err}")
    assert abs(err["ttft_p50"]) <= TTFT_BOUND_IN_SUITE, err
    assert abs(err["throughput"]) <= BOUND, err


def test_json_is_the_advice_the_daemon_keeps_and_last_n_trims_the_window(
        recorded: tuple[Stack, AdviceModel]) -> None:
    stack, _ = recorded
    trimmed = advice_of(stack, "--last", "50")
    assert trimmed.requests == 50
    assert {o.settings["decider.policy"] for o in trimmed.options} == {"gpu-only", "classic", "adaptive"}
    assert trimmed.recommended is not None and trimmed.summary
    assert trimmed.profiles == {"gpu": "tiny", "cpu": "tiny"}
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        kept = AdviceModel.model_validate(control.get("/v1/advice").raise_for_status().json())
    assert kept == trimmed
