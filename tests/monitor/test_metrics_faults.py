"""/metrics hanging, slow, garbage or lying: requests keep flowing, the state shows no nonsense."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.plugins.stack import Stack
from tests.probe import (
    Usage,
    assert_drained,
    assert_no_traceback,
    assert_state_sane,
    chat,
    engine_states,
    health,
    state,
    wait_until,
)

#: Scrapes give up before the slow fault answers (5 s) so an engine whose /metrics stalls is
#: marked within seconds, and the pace holds between requests (an idle box is otherwise
#: scraped every 5 s, ``monitor.idle_interval``, and each fault took ~10 s to show and ~5 s
#: to clear). A healthy answer has 2 s, which a busy machine does not run out of.
FAST_MONITOR = {"monitor": {"interval": 0.2, "idle_interval": 0, "scrape_timeout": 2.0, "stale_after": 2,
                            "down_after": 4}}


def gpu_view(stack: Stack) -> dict[str, Any]:
    """The GPU engine in GET /v1/state."""
    return dict(next(e for e in state(stack)["engines"] if e["name"] == "gpu0"))


def test_unreadable_metrics_mark_the_engine_and_never_block_requests(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False, config=FAST_MONITOR)
    assert chat(stack, stream=True).complete
    baseline = Usage.of(stack)
    for mode in ("hang", "slow", "garbage"):
        stack.faults(stack.gpu_url, metrics=mode)
        # Requests right away, while scrapes stall or fail: they never wait on the monitor.
        for stream in (True, False, True):
            assert chat(stack, stream=stream).complete, mode
        assert wait_until(lambda: engine_states(stack)["gpu0"] in ("stale", "down")), mode
        view = gpu_view(stack)
        assert view["last_error"], view
        body = health(stack).json()
        assert body["status"] == "degraded" and any("gpu0" in r for r in body["reasons"]), body
        for stream in (True, False):
            assert chat(stack, stream=stream).complete, mode
        assert_state_sane(state(stack))
        # Readable again: the engine comes back without a restart.
        stack.faults(stack.gpu_url)
        assert wait_until(lambda: engine_states(stack)["gpu0"] == "up"), mode
        assert wait_until(lambda: health(stack).json()["status"] == "ok"), mode
        assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_contradictory_metrics_are_not_shown_and_do_not_break_routing(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False, config=FAST_MONITOR)
    assert chat(stack, stream=True).complete
    baseline = Usage.of(stack)
    stack.faults(stack.gpu_url, metrics="contradictory")
    stack.faults(stack.cpu_url, metrics="contradictory")
    lied_at = time.time()
    # Wait until the lying numbers (running = -1, KV usage 1.7) have been scraped a few times.
    assert wait_until(lambda: float(gpu_view(stack)["scraped_at"] or 0) > lied_at + 0.5)
    snapshot = state(stack)
    assert_state_sane(snapshot)
    for stream in (True, False, True, False):
        assert chat(stack, stream=stream).complete
    for name in ("gpu0", "cpu0"):
        assert engine_states(stack)[name] == "up"
    assert_state_sane(state(stack))
    assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_both_engines_metrics_hanging_still_serves(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False, config=FAST_MONITOR)
    assert chat(stack, stream=True).complete
    baseline = Usage.of(stack)
    stack.faults(stack.gpu_url, metrics="hang")
    stack.faults(stack.cpu_url, metrics="hang")
    assert wait_until(lambda: set(engine_states(stack).values()) == {"down"})
    # Both look down, so requests are refused cleanly (503): never a hang on a scrape.
    outcome = chat(stack, stream=True)
    assert outcome.clean, outcome
    assert outcome.complete or outcome.status == 503, outcome
    stack.faults(stack.gpu_url)
    stack.faults(stack.cpu_url)
    assert wait_until(lambda: health(stack).json()["status"] == "ok")
    assert chat(stack, stream=False).complete
    assert_drained(stack, baseline)
    assert_no_traceback(stack)
