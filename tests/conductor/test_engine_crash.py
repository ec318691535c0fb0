"""Engines crashing before, during and after requests, refusing connections, flapping, all gone.

For each: what the client gets (a whole answer or a clean OpenAI error, never a hang or a
silent truncation), what /health and the control state say, and that the in-flight counts,
the queue and the connections come back to zero.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx

from syshaxd.sse import Decoder
from tests.conductor.conftest import Restart
from tests.plugins.stack import Stack
from tests.probe import (
    MESSAGES,
    Outcome,
    Usage,
    assert_drained,
    assert_no_traceback,
    assert_openai_error,
    chat,
    engine_states,
    health,
    kill,
    state,
    wait_until,
)

GPU, CPU = 0, 1


def warm(stack: Stack, n: int = 3) -> Usage:
    """A few requests so pooled connections exist; returns the daemon's usage afterwards."""
    for i in range(n):
        assert chat(stack, stream=bool(i % 2)).complete
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
    return Usage.of(stack)


def test_engine_killed_just_before_requests_then_refusing_connections(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    kill(stack.engines[GPU])
    # The monitor has not noticed yet: the pooled connections are dead, the port refuses.
    outcomes = [chat(stack, stream=stream) for stream in (True, False, True, False)]
    assert all(o.complete for o in outcomes), outcomes
    assert stack.metric("syshax_requests_total", device="cpu", outcome="ok") >= len(outcomes)
    # Then the monitor marks it down, says why, and requests are routed around it, not retried.
    assert wait_until(lambda: engine_states(stack)["gpu0"] == "down")
    gpu = next(e for e in state(stack)["engines"] if e["name"] == "gpu0")
    assert gpu["last_error"], gpu
    response = health(stack)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "degraded" and any("gpu0" in r for r in body["reasons"]), body
    resubmits = stack.metric("syshax_resubmits_total")
    for stream in (True, False):
        assert chat(stack, stream=stream).complete
    assert stack.metric("syshax_resubmits_total") == resubmits
    assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_engine_killed_while_a_request_waits_for_its_first_byte(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    stack.faults(stack.gpu_url, added_latency=30.0)  # the GPU holds every request before its first byte
    results: dict[bool, Outcome] = {}

    def send(stream: bool) -> None:
        results[stream] = chat(stack, stream=stream)

    threads = [threading.Thread(target=send, args=(stream,)) for stream in (True, False)]
    for t in threads:
        t.start()
    assert wait_until(lambda: stack.metric("syshax_inflight", engine="gpu0") == 2)
    kill(stack.engines[GPU])
    for t in threads:
        t.join(timeout=60)
    # Nothing reached the client yet: both are resubmitted to the CPU and complete there.
    assert results[True].complete and results[False].complete, results
    assert stack.metric("syshax_resubmits_total") == 2
    assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_engine_dying_mid_stream_ends_it_with_an_error_event(make_stack: Callable[..., Stack],
                                                            restart_engine: Restart) -> None:
    stack = make_stack(policy="classic", pair=False, speed=5.0)
    baseline = warm(stack)
    # The engine exits on its own after its 3rd chunk (the simulator's die_mid_stream).
    stack.faults(stack.gpu_url, die_mid_stream=True)
    outcome = chat(stack, stream=True, max_tokens=60, ignore_eos=True)
    assert outcome.clean and outcome.error is not None and outcome.chunks >= 1, outcome
    assert "gpu0" in outcome.error["message"]
    assert_drained(stack, baseline)
    restart_engine(stack, GPU)
    assert wait_until(lambda: engine_states(stack)["gpu0"] == "up")

    # SIGKILLed by us while the stream flows.
    events: list[str] = []
    decoder = Decoder(strict=True)
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions", timeout=30,
                      json={"messages": MESSAGES, "max_tokens": 1000, "stream": True, "ignore_eos": True}) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            before = len(events)
            events.extend(e.data.decode() for e in decoder.feed(chunk))
            if before < 3 <= len(events):
                kill(stack.engines[GPU])
    # The answer had started: the client is told it is broken, then [DONE]; never a hang.
    assert events[-1] == "[DONE]", events[-3:]
    assert '"error"' in events[-2] and "gpu0" in events[-2], events[-2]
    assert sum('"error"' in e for e in events) == 1
    assert stack.metric("syshax_requests_total", outcome="engine_error") == 2
    assert_drained(stack, baseline)
    # The next request goes to the CPU.
    assert chat(stack, stream=True).complete
    assert_no_traceback(stack)


def test_engine_killed_after_a_stream_then_back(make_stack: Callable[..., Stack], restart_engine: Restart) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack, n=6)  # keep-alive connections to the GPU sit in the pool
    kill(stack.engines[GPU])
    assert chat(stack, stream=True).complete
    assert chat(stack, stream=False).complete
    assert wait_until(lambda: engine_states(stack)["gpu0"] == "down")
    restart_engine(stack, GPU)
    assert wait_until(lambda: engine_states(stack)["gpu0"] == "up")
    assert wait_until(lambda: health(stack).json()["status"] == "ok")
    before = stack.metric("syshax_requests_total", device="gpu", outcome="ok")
    assert chat(stack, stream=True).complete
    assert stack.metric("syshax_requests_total", device="gpu", outcome="ok") == before + 1  # served by the GPU again
    assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_both_engines_down_then_back(make_stack: Callable[..., Stack], restart_engine: Restart) -> None:
    stack = make_stack(policy="classic", pair=False)
    baseline = warm(stack)
    kill(stack.engines[GPU])
    kill(stack.engines[CPU])
    # Before the monitor notices: both tried, a clean 502 naming both (or 503 once noticed).
    early = chat(stack, stream=True)
    assert early.clean and early.error is not None and early.status in (502, 503), early
    assert wait_until(lambda: health(stack).status_code == 503)
    body = health(stack).json()
    assert body["status"] == "down" and len(body["reasons"]) >= 2, body
    assert set(engine_states(stack).values()) == {"down"}
    for stream in (True, False):
        response = httpx.post(f"{stack.url}/v1/chat/completions", timeout=30,
                              json={"messages": MESSAGES, "max_tokens": 3, "stream": stream})
        error = assert_openai_error(response, 503)
        assert "gpu0" in error["message"] and "cpu0" in error["message"], error
    assert_drained(stack, baseline)
    restart_engine(stack, CPU)
    assert wait_until(lambda: health(stack).status_code == 200)
    assert chat(stack, stream=True).complete
    restart_engine(stack, GPU)
    assert wait_until(lambda: health(stack).json()["status"] == "ok")
    assert chat(stack, stream=False).complete
    assert_drained(stack, baseline)
    assert_no_traceback(stack)


def test_flapping_engine_every_request_ends_cleanly(make_stack: Callable[..., Stack], restart_engine: Restart) -> None:
    stack = make_stack(policy="classic", pair=False, speed=5.0)
    baseline = warm(stack)
    outcomes: list[Outcome] = []
    stop = threading.Event()

    def client(stream: bool) -> None:
        while not stop.is_set():
            outcomes.append(chat(stack, stream=stream, max_tokens=12, ignore_eos=True))

    threads = [threading.Thread(target=client, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    def answered(more: int) -> None:
        """Wait until the clients have had ``more`` answers (whole or errors) since now."""
        start = len(outcomes)
        assert wait_until(lambda: len(outcomes) >= start + more, timeout=120), f"clients stuck at {len(outcomes)}"

    try:
        for _ in range(2):  # two flaps; requests are answered in each phase of each
            answered(8)
            kill(stack.engines[GPU])
            assert wait_until(lambda: engine_states(stack)["gpu0"] == "down", timeout=120)
            answered(8)
            restart_engine(stack, GPU)
            assert wait_until(lambda: engine_states(stack)["gpu0"] == "up", timeout=120)
        answered(8)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    bad = [o for o in outcomes if not o.clean]
    assert not bad, bad[:5]
    assert sum(o.complete for o in outcomes) > 0
    # Only a stream the GPU was already answering may end in an error; everything else completes.
    errors = [o for o in outcomes if o.error is not None]
    assert all(o.status == 200 and o.chunks >= 1 for o in errors), errors[:5]
    assert wait_until(lambda: engine_states(stack)["gpu0"] == "up")
    assert_drained(stack, baseline)
    assert_no_traceback(stack)
