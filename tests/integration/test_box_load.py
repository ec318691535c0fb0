"""What a cluster router reads from one box: /get_load (both shapes), /load, /health, a box drain."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack


def _streams(stack: Stack, count: int, max_tokens: int) -> tuple[list[threading.Thread], list[bool]]:
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


def _refused(url: str) -> bool:
    """The port no longer serves: refused, or (a connection the kernel queued just before the
    listener closed) dropped without a response. Any answer at all, 503 included, is not refused."""
    try:
        httpx.get(f"{url}/health", timeout=2)
    except (httpx.ConnectError, httpx.RemoteProtocolError):
        return True
    return False


def test_get_load_in_sglangs_shape_and_vllms_load_follow_the_box(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", speed=1.0, config={"services": {"conductor": {"load_format": "sglang"}}})
    idle = httpx.get(f"{stack.url}/get_load", timeout=5).json()
    assert idle == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
    assert httpx.get(f"{stack.url}/load", timeout=5).json() == {"server_load": 0}
    card = httpx.get(f"{stack.url}/get_model_info", timeout=5).json()
    assert card["model_path"] == "ds-32b" and card["is_generation"] is True
    info = httpx.get(f"{stack.url}/get_server_info", timeout=5).json()
    assert info["dp_size"] == 1 and {e["device"] for e in info["engines"]} == {"gpu", "cpu"}
    threads, done = _streams(stack, 5, 300)
    try:
        assert wait_until(lambda: httpx.get(f"{stack.url}/load", timeout=5).json()["server_load"] == 5, timeout=20)
        (rank,) = httpx.get(f"{stack.url}/get_load", timeout=5).json()
        assert rank["num_reqs"] == 5 and rank["num_waiting_reqs"] == 0
        assert 0 < rank["num_tokens"] <= 5 * 300 + 5 * 64  # what the five may still write (+ prompts)
        assert stack.metric("vllm:num_requests_running") == 5 == stack.metric("syshax_inflight")
    finally:
        for thread in threads:
            thread.join(timeout=120)
    assert done == [True] * 5
    assert wait_until(lambda: httpx.get(f"{stack.url}/load", timeout=5).json() == {"server_load": 0}, timeout=10)


def test_a_box_drain_answers_503_serves_the_notice_finishes_in_flight_and_exits(
        make_stack: Callable[..., Stack]) -> None:
    # The notice must outlast the three CLI calls below (a second each on a loaded machine).
    notice = 5.0
    stack = make_stack(policy="gpu-only", speed=1.0, config={"system": {"drain_notice": notice}})
    ok = httpx.get(f"{stack.url}/health", timeout=5)
    assert ok.status_code == 200 and ok.json()["status"] == "ok"
    threads, done = _streams(stack, 3, 1500)
    assert wait_until(lambda: httpx.get(f"{stack.url}/load", timeout=5).json()["server_load"] == 3, timeout=20)
    drained = subprocess.run([str(Path(sys.executable).parent / "syshax"), "drain", "--socket",
                              str(stack.tmp / "run" / "control.sock")], capture_output=True, text=True, timeout=30)
    assert drained.returncode == 0, drained.stderr
    began = time.monotonic()
    health = httpx.get(f"{stack.url}/health", timeout=5)
    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "draining" and "syshax drain" in body["reasons"][0]
    # Within the notice a request that still arrives is served.
    late = httpx.post(f"{stack.url}/v1/chat/completions", timeout=30,
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert late.status_code == 200 and time.monotonic() - began < notice
    # A second drain changes nothing; the state says the box drains.
    again = subprocess.run([str(Path(sys.executable).parent / "syshax"), "drain", "--socket",
                            str(stack.tmp / "run" / "control.sock")], capture_output=True, text=True, timeout=30)
    assert "already draining" in again.stdout
    status = subprocess.run([str(Path(sys.executable).parent / "syshax"), "status", "--socket",
                             str(stack.tmp / "run" / "control.sock")], capture_output=True, text=True, timeout=30)
    assert "DRAINING (syshax drain" in status.stdout
    # After the notice the port closes while the streams still run; they finish all the same.
    assert wait_until(lambda: _refused(stack.url), timeout=10)
    assert any(thread.is_alive() for thread in threads)
    for thread in threads:
        thread.join(timeout=120)
    assert done == [True, True, True]
    assert stack.daemon.wait(timeout=30) == 0
    assert "draining the box" in stack.log_text()


def test_sigterm_takes_the_same_path_health_first(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", speed=1.0, config={"system": {"drain_notice": 1.5}})
    threads, done = _streams(stack, 2, 100)
    assert wait_until(lambda: httpx.get(f"{stack.url}/load", timeout=5).json()["server_load"] == 2, timeout=20)
    stack.daemon.send_signal(signal.SIGTERM)
    assert wait_until(lambda: httpx.get(f"{stack.url}/health", timeout=5).status_code == 503, timeout=5)
    assert "SIGTERM" in httpx.get(f"{stack.url}/health", timeout=5).json()["reasons"][0]
    for thread in threads:
        thread.join(timeout=120)
    assert done == [True, True]
    assert stack.daemon.wait(timeout=30) == 0
