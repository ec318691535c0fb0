"""``syshax advise`` on a box where the CPU cannot help (an A100 pair beside a Kunpeng 920
running a 32B model: seconds per CPU prefill, a GPU far from full): it says so in one
sentence and recommends GPU-only; ``--apply`` switches the daemon to it in one PATCH."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.advise.traffic import Workload, advice_of, advise, drive
from tests.plugins.stack import Stack

LOAD = Workload(requests=50, rate=5.0, prompt=(50, 300), max_tokens=(8, 32), seed=11)


@pytest.fixture(scope="module")
def box(make_module_stack: Callable[..., Stack]) -> Stack:
    """The stack (adaptive) after the workload."""
    stack = make_module_stack(policy="adaptive", gpu_profile="gpu-a100", cpu_profile="cpu-kunpeng920-q4", speed=1.0)
    ok = drive(stack, LOAD)
    assert all(ok), f"{ok.count(False)} of {len(ok)} requests failed"
    return stack


def _policy(stack: Stack) -> str:
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
        return str(control.get("/v1/state").raise_for_status().json()["config"]["decider.policy"])


def test_when_the_cpu_cannot_help_it_says_so_and_recommends_gpu_only(box: Stack) -> None:
    advice = advice_of(box)
    assert advice.recommended is not None
    assert advice.options[advice.recommended].settings == {"decider.policy": "gpu-only"}
    assert advice.summary.startswith("The CPU cannot help this traffic")
    assert advice.summary.count(". ") == 0  # one sentence
    current = next(o for o in advice.options if o.current)
    assert current.settings["decider.policy"] == "adaptive"


def test_apply_switches_the_daemon_to_the_recommendation_in_one_patch(box: Stack) -> None:
    done = advise(box, "--apply")
    assert done.returncode == 0, done.stdout
    assert "The CPU cannot help this traffic" in done.stdout
    assert "decider.policy = gpu-only" in done.stdout
    assert _policy(box) == "gpu-only"
    again = advise(box, "--apply")
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout and _policy(box) == "gpu-only"
