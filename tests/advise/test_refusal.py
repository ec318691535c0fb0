"""``syshax advise`` refuses when it cannot know: on one recorded request and on a window too short
for its figures it recommends nothing, says why in one sentence, exits 3, and ``--apply`` changes
nothing in the running daemon; ``--force`` overrides and says so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sim.advise.cli import REFUSED
from syshaxd.schema import AdviceModel
from tests.advise.traffic import Workload, advise, drive
from tests.plugins.stack import Stack

pytestmark = pytest.mark.timeout(600)

#: 40 requests at 20/s on engines at 20x speed: enough requests, a window of about two seconds.
BURST = Workload(requests=40, rate=20.0, prompt=(20, 80), max_tokens=(4, 12), seed=5)


def _control(stack: Stack) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock")),
                        base_url="http://syshaxd", timeout=10)


def _decider(stack: Stack) -> dict[str, Any]:
    with _control(stack) as control:
        config = control.get("/v1/state").raise_for_status().json()["config"]
    return {k: v for k, v in config.items() if k.startswith("decider.")}


def _kept(stack: Stack) -> AdviceModel:
    with _control(stack) as control:
        return AdviceModel.model_validate(control.get("/v1/advice").raise_for_status().json())


def _refused_and_unchanged(stack: Stack, why: str) -> None:
    # A setting the grid would move away from: classic without a CPU batch limit to speak of.
    with _control(stack) as control:
        control.patch("/v1/config", json={"decider.cpu_max_batch_size": 1}).raise_for_status()
    before = _decider(stack)
    done = advise(stack, "--apply")
    assert done.returncode == REFUSED, (done.stdout, done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("advise recommends nothing")]
    assert len(lines) == 1 and why in lines[0], done.stdout
    assert "nothing changed" in done.stdout
    assert _decider(stack) == before
    kept = _kept(stack)
    assert kept.recommended is None and kept.refused is not None and why in kept.refused
    assert [o.current for o in kept.options] == [True]  # only the self-check was replayed


def test_one_recorded_request_is_too_few_to_advise_on(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic")
    assert drive(stack, Workload(requests=1, rate=1.0, prompt=(20, 20), max_tokens=(4, 4))) == [True]
    _refused_and_unchanged(stack, "1 recorded requests are too few to advise on")


def test_a_window_too_short_is_refused_and_force_advises_anyway(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic")
    assert all(drive(stack, BURST))
    _refused_and_unchanged(stack, "s is too short to advise on")
    forced = advise(stack, "--json", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "warning: --force: advising although a window of" in forced.stderr
    advice = AdviceModel.model_validate_json(forced.stdout)
    assert advice.forced and advice.recommended is not None and len(advice.options) > 1
    assert advice.refused is not None and "too short" in advice.refused
