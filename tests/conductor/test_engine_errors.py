"""Engines answering errors or garbage: resubmitted once before the first byte, else a clean 502."""

from __future__ import annotations

from collections.abc import Callable

from tests.plugins.stack import Stack
from tests.probe import (
    Usage,
    assert_drained,
    assert_no_traceback,
    chat,
    engine_states,
    wait_until,
)


def warm(stack: Stack) -> Usage:
    """One request each way; the daemon's usage afterwards."""
    assert chat(stack, stream=True).complete and chat(stack, stream=False).complete
    return Usage.of(stack)


#: Each makes every generation request on the engine fail before its first byte.
ONE_ENGINE_FAULTS: list[dict[str, object]] = [
    {"error_rate": 1.0, "error_status": 500},
    {"error_rate": 1.0, "error_status": 503},
    {"error_rate": 1.0, "error_status": 429},
    {"garbage_body": True},
]


def test_one_engine_failing_requests_complete_on_the_other(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    for fault in ONE_ENGINE_FAULTS:
        resubmits = stack.metric("syshax_resubmits_total")
        stack.faults(stack.gpu_url, **fault)
        outcomes = [chat(stack, stream=stream) for stream in (True, False, True, False)]
        assert all(o.complete for o in outcomes), (fault, outcomes)
        assert stack.metric("syshax_resubmits_total") == resubmits + len(outcomes), fault
        # The engine still answers /metrics: it is up, only its answers are bad.
        assert engine_states(stack)["gpu0"] == "up"
        assert_drained(stack, baseline)
        stack.faults(stack.gpu_url)
    assert_no_traceback(stack)


def test_both_engines_failing_is_a_clean_502_naming_both(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    for fault in ({"error_rate": 1.0}, {"garbage_body": True}):
        stack.faults(stack.gpu_url, **fault)
        stack.faults(stack.cpu_url, **fault)
        for stream in (True, False):
            outcome = chat(stack, stream=stream)
            assert outcome.clean and outcome.error is not None and outcome.status == 502, (fault, outcome)
            assert "gpu0" in outcome.error["message"] and "cpu0" in outcome.error["message"], outcome.error
        stack.faults(stack.gpu_url)
        stack.faults(stack.cpu_url)
        assert chat(stack, stream=True).complete
        assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_random_errors_on_both_engines_every_request_ends_cleanly(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    stack.faults(stack.gpu_url, error_rate=0.5)
    stack.faults(stack.cpu_url, error_rate=0.5, error_status=502)
    outcomes = [chat(stack, stream=i % 2 == 0) for i in range(30)]
    assert all(o.clean for o in outcomes), [o for o in outcomes if not o.clean]
    assert all(o.complete or o.status == 502 for o in outcomes), outcomes
    assert any(o.complete for o in outcomes)
    assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_slow_first_byte_is_waited_for_not_failed(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    stack.faults(stack.gpu_url, added_latency=1.5)
    for stream in (True, False):
        assert chat(stack, stream=stream).complete
    assert stack.metric("syshax_resubmits_total") == 0
    assert_drained(stack, baseline)


def test_request_timeout_is_a_clean_504(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False, config={"system": {"request_timeout": 1.5}})
    baseline = warm(stack)
    stack.faults(stack.gpu_url, added_latency=20.0)
    stack.faults(stack.cpu_url, added_latency=20.0)
    for stream in (True, False):
        outcome = chat(stack, stream=stream)
        assert outcome.clean and outcome.error is not None and outcome.status == 504, outcome
    assert wait_until(lambda: stack.metric("syshax_requests_total", outcome="timeout") == 2)
    assert_drained(stack, baseline)
    assert_no_traceback(stack)
