"""Two syshax boxes behind the real vllm-router (``power_of_two``): a busy box gets less, a
draining box gets nothing new while its streams finish, and no request is lost.

vllm-router is the pinned wheel the test setup installs (``pyproject.toml``, test extra).
Its 0.1.17 polls each worker's ``GET /get_load`` every ``--worker-startup-check-interval``
seconds and sends a request to the worker with the lower polled load; its health checks
drop a worker after ``--health-failure-threshold`` failed ``/health`` checks.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.plugins.ports import free_port, stop_processes, wait_http, wait_until
from tests.plugins.stack import Stack

ROUTER_VERSION = "0.1.17"
#: What the boxes run: every request on the GPU engine, a box drain that keeps serving what
#: arrives for 3 s after /health turned 503 (the router below notices within ~2 s).
BOX = {"system": {"drain_notice": 3.0, "shutdown_grace": 30},
       "decider": {"gpu_max_batch_size": 256, "cpu_max_batch_size": 256}}


def _router_binary() -> str:
    found = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or shutil.which("vllm-router")
    if found is None:
        pytest.fail(f"vllm-router {ROUTER_VERSION} is not installed: `make test` installs it (pyproject test extra)")
    return found


@dataclass
class Fleet:
    """Two boxes and the router in front of them."""

    a: Stack
    b: Stack
    router: str

    def chat(self, max_tokens: int = 4, stream: bool = False, via: str | None = None) -> tuple[str, httpx.Response]:
        """One chat request through the router (or straight to ``via``); its id and answer."""
        rid = uuid.uuid4().hex
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": stream,
                "ignore_eos": True}
        answer = httpx.post(f"{via or self.router}/v1/chat/completions", json=body,
                            headers={"X-Request-ID": rid}, timeout=60)
        return rid, answer


@pytest.fixture
def fleet(make_stacks: Callable[[str], Callable[..., Stack]], tmp_path: Path) -> Iterator[Fleet]:
    """Two boxes on simulated engines (real time) behind vllm-router with ``power_of_two``."""
    a = make_stacks("a")(policy="gpu-only", speed=1.0, config=BOX)
    b = make_stacks("b")(policy="gpu-only", speed=1.0, config=BOX)
    port = free_port()
    log = open(tmp_path / "router.log", "wb")  # noqa: SIM115 - closed below
    router = subprocess.Popen(
        [_router_binary(), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", a.url, b.url,
         "--policy", "power_of_two", "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
         "--health-failure-threshold", "1", "--health-success-threshold", "1", "--log-level", "warning",
         "--prometheus-port", str(free_port())], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc=router, timeout=60)
        yield Fleet(a, b, f"http://127.0.0.1:{port}")
    finally:
        stop_processes([router])
        log.close()


def _served(stack: Stack) -> set[str]:
    """The request ids a box's access log names."""
    return {word[3:] for line in stack.log_text().splitlines() if "request id=" in line
            for word in line.split() if word.startswith("id=")}


def _stream(url: str, results: list[tuple[bool, str]], max_tokens: int) -> None:
    """A streamed chat request straight to ``url``: (ended with [DONE], its text)."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as answer:
        text = "".join(answer.iter_text())
    results.append((answer.status_code == 200 and "data: [DONE]" in text, text[-200:]))


def _load(stack: Stack) -> int:
    return int(httpx.get(f"{stack.url}/get_load", timeout=5).json()["load"])


def test_a_saturated_box_gets_fewer_requests_and_its_gauges_say_why(fleet: Fleet) -> None:
    # Box A's GPU gets 24 long streams straight from clients of its own (no router).
    streams: list[tuple[bool, str]] = []
    busy = [threading.Thread(target=_stream, args=(fleet.a.url, streams, 400)) for _ in range(24)]
    for thread in busy:
        thread.start()
    try:
        assert wait_until(lambda: _load(fleet.a) >= 24, timeout=20)
        # What the endpoint picker scrapes is what the conductor counts, in the same exposition.
        running = fleet.a.metric("vllm:num_requests_running")
        waiting = fleet.a.metric("vllm:num_requests_waiting")
        assert running + waiting == fleet.a.metric("syshax_inflight") + fleet.a.metric("syshax_queue_depth") >= 24
        assert fleet.b.metric("vllm:num_requests_running") == 0
        time.sleep(2.5)  # the router's next /get_load poll (every second)
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: fleet.chat(), range(40)))
        assert all(answer.status_code == 200 for _, answer in answers), [a.text for _, a in answers]
        ids = {rid for rid, _ in answers}
        # Each box logs a request just after its answer: wait for the last lines.
        assert wait_until(lambda: ids <= _served(fleet.a) | _served(fleet.b), timeout=10)
        on_a, on_b = ids & _served(fleet.a), ids & _served(fleet.b)
        assert not on_a & on_b
        print(f"\nsplit A (24 streams running) / B (idle) = {len(on_a)}/{len(on_b)}")
        # power_of_two over two workers compares both: the idle box takes (nearly) everything.
        assert len(on_b) >= 36, f"split A/B = {len(on_a)}/{len(on_b)}"
    finally:
        for thread in busy:
            thread.join(timeout=120)
    assert len(streams) == 24 and all(ok for ok, _ in streams)


def test_draining_a_box_moves_new_requests_to_its_peer_and_loses_nothing(fleet: Fleet) -> None:
    streams: list[tuple[bool, str]] = []
    # Streams in flight on box A when it drains: some through the router, some straight.
    inflight = [threading.Thread(target=_stream, args=(url, streams, 600))
                for url in [fleet.a.url] * 3 + [fleet.router] * 4]
    for thread in inflight:
        thread.start()
    assert wait_until(lambda: _load(fleet.a) >= 3, timeout=20)
    drained = subprocess.run([str(Path(sys.executable).parent / "syshax"), "drain", "--socket",
                              str(fleet.a.tmp / "run" / "control.sock")], capture_output=True, text=True, timeout=30)
    assert drained.returncode == 0, drained.stderr
    assert "503" in drained.stdout
    t_drain = time.monotonic()
    health = httpx.get(f"{fleet.a.url}/health", timeout=5)
    assert health.status_code == 503 and "draining" in health.json()["reasons"][0]

    sent: list[tuple[float, str, int]] = []
    while time.monotonic() - t_drain < 8.0:  # through the notice, the port closing, the streams ending
        rid, answer = fleet.chat()
        sent.append((time.monotonic() - t_drain, rid, answer.status_code))
    for thread in inflight:
        thread.join(timeout=120)

    assert [s for s in sent if s[2] != 200] == []
    assert len(streams) == 7 and all(ok for ok, _ in streams), [text for ok, text in streams if not ok]
    assert fleet.a.daemon.wait(timeout=40) == 0  # the box exited on its own, cleanly
    on_a = _served(fleet.a)  # box A has exited: its log is complete
    late = [rid for at, rid, _ in sent if at > 2.5]  # the router has seen /health 503 by then
    assert late and not set(late) & on_a
    assert wait_until(lambda: {rid for _, rid, _ in sent} <= on_a | _served(fleet.b), timeout=10)
