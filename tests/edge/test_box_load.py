"""What a cluster router reads from one box: /get_load (both shapes), /load, /health, a box drain."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack


def _streams(stack: Stack, count: int, max_tokens: int) -> tuple[list[threading.Thread], list[bool]]:
    """``count`` streamed requests, each read to its end in a thread; ``done`` gets whether each
    came whole (200 and ``[DONE]``)."""
    done: list[bool] = []

    def one() -> None:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True,
                "ignore_eos": True}
        with httpx.stream("POST", f"{stack.url}/v1/chat/completions", json=body, timeout=120) as answer:
            done.append(answer.status_code == 200 and "data: [DONE]" in "".join(answer.iter_text()))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, done


@contextlib.contextmanager
def _first_tokens(stack: Stack, count: int, max_tokens: int) -> Iterator[None]:
    """``count`` streamed requests on raw sockets, each read up to its first token (so running on
    the engine); leaving the block closes them, as clients that go away do."""
    host, port = stack.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    with contextlib.ExitStack() as open_sockets:
        for _ in range(count):
            sock = open_sockets.enter_context(socket.create_connection((host, int(port)), timeout=60))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            got = b""
            while b'"content":' not in got:  # the role chunk has no content; the first token has
                chunk = sock.recv(65536)
                assert chunk, f"the stream ended before its first token: {got!r}"
                got += chunk
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
        yield


def _syshax(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``syshax`` command against the stack's control socket."""
    return subprocess.run([str(Path(sys.executable).parent / "syshax"), *args, "--socket",
                           str(stack.tmp / "run" / "control.sock")], capture_output=True, text=True, timeout=60)


def _refused(url: str) -> bool:
    """The port no longer serves: refused, or (a connection the kernel queued just before the
    listener closed) dropped without a response. Any answer at all, 503 included, is not refused."""
    try:
        httpx.get(f"{url}/health", timeout=10)
    except (httpx.ConnectError, httpx.RemoteProtocolError):
        return True
    return False


def _load(stack: Stack) -> int:
    return int(httpx.get(f"{stack.url}/load", timeout=10).json()["server_load"])


def test_get_load_in_sglangs_shape_and_vllms_load_follow_the_box(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", speed=1.0, config={"services": {"conductor": {"load_format": "sglang"}}})
    idle = httpx.get(f"{stack.url}/get_load", timeout=10).json()
    assert idle == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
    assert _load(stack) == 0
    card = httpx.get(f"{stack.url}/get_model_info", timeout=10).json()
    assert card["model_path"] == "ds-32b" and card["is_generation"] is True
    info = httpx.get(f"{stack.url}/get_server_info", timeout=10).json()
    assert info["dp_size"] == 1 and {e["device"] for e in info["engines"]} == {"gpu", "cpu"}
    # Five answers running on the GPU, then its clock stopped: the box holds still while it is read.
    with _first_tokens(stack, 5, 2000):
        stack.faults(stack.gpu_url, paused=True)
        assert wait_until(lambda: stack.engine_metric(stack.gpu_url, "vllm:num_requests_running") == 5)
        assert wait_until(lambda: _load(stack) == 5)  # the monitor's next scrape agrees with the books
        (rank,) = httpx.get(f"{stack.url}/get_load", timeout=10).json()
        assert rank["num_reqs"] == 5 and rank["num_waiting_reqs"] == 0
        assert 0 < rank["num_tokens"] <= 5 * 2000 + 5 * 64  # what the five may still write (+ prompts)
        assert stack.metric("vllm:num_requests_running") == 5 == stack.metric("syshax_inflight")
    # The clients left: the box lets go of them.
    stack.faults(stack.gpu_url, paused=False)
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
    assert wait_until(lambda: httpx.get(f"{stack.url}/get_load", timeout=10).json()[0]["num_reqs"] == 0)
    assert wait_until(lambda: _load(stack) == 0)


#: Longer than any test runs: the notice never ends inside these tests (the fixture's SIGTERM,
#: a second stop request, ends the daemon at once).
WHOLE_TEST = 600.0


@pytest.mark.parametrize("how", ["syshax drain", "SIGTERM"])
def test_a_drained_box_answers_503_and_serves_what_still_arrives_during_the_notice(
        make_stack: Callable[..., Stack], how: str) -> None:
    stack = make_stack(policy="gpu-only", config={"system": {"drain_notice": WHOLE_TEST}})
    ok = httpx.get(f"{stack.url}/health", timeout=10)
    assert ok.status_code == 200 and ok.json()["status"] == "ok"
    if how == "SIGTERM":
        stack.daemon.send_signal(signal.SIGTERM)
        assert wait_until(lambda: httpx.get(f"{stack.url}/health", timeout=10).status_code == 503)
    else:
        drained = _syshax(stack, "drain")
        assert drained.returncode == 0, drained.stderr
    health = httpx.get(f"{stack.url}/health", timeout=10)
    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "draining" and how in body["reasons"][0]
    # During the notice a request that still arrives is served.
    late = httpx.post(f"{stack.url}/v1/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert late.status_code == 200
    # A second drain changes nothing; the state says the box drains.
    assert "already draining" in _syshax(stack, "drain").stdout
    assert f"DRAINING ({how}" in _syshax(stack, "status").stdout
    assert stack.daemon.poll() is None
    _stop_at_once(stack)


def _stop_at_once(stack: Stack) -> None:
    """SIGTERM until syshaxd exits: past the first stop request, one ends the drain at once."""
    for _ in range(30):
        stack.daemon.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            stack.daemon.wait(timeout=2)
            return
    raise AssertionError("syshaxd did not stop on repeated SIGTERM")


def test_after_the_notice_the_port_closes_and_requests_in_flight_finish_before_syshaxd_exits(
        make_stack: Callable[..., Stack]) -> None:
    # The grace outlasts the test: the streams end when the test lets the engine go on, not on a timer.
    stack = make_stack(policy="gpu-only", config={"system": {"drain_notice": 0.5, "shutdown_grace": WHOLE_TEST}})
    stack.faults(stack.gpu_url, paused=True)  # the three streams stay in flight until resumed
    threads, done = _streams(stack, 3, 20)
    try:
        assert wait_until(lambda: stack.metric("syshax_inflight") == 3)
        drained = _syshax(stack, "drain")
        assert drained.returncode == 0, drained.stderr
        assert wait_until(lambda: _refused(stack.url))
        assert all(thread.is_alive() for thread in threads) and done == []
    finally:
        stack.faults(stack.gpu_url, paused=False)
        for thread in threads:
            thread.join(timeout=120)
    assert done == [True, True, True]
    assert stack.daemon.wait(timeout=60) == 0
    assert "draining the box" in stack.log_text()


