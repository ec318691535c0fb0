"""Two syshax boxes behind the real vllm-router (``power_of_two``): a busy box gets less, a
draining box gets nothing new while its streams finish, and no request is lost.

vllm-router is the pinned wheel the test setup installs (``pyproject.toml``, test extra).
Its 0.1.17 polls each worker's ``GET /get_load`` every few seconds, sends a request to the
worker with the lower polled load and logs each choice with the loads it compared ("Power-of-
two selection: A=24 vs B=0 -> selected B"); its health checks drop a worker after
``--health-failure-threshold`` failed ``/health`` checks. The tests wait for what the router
says it saw, never for a number of seconds.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.plugins.ports import free_port, stop_processes, wait_http, wait_until
from tests.plugins.stack import Stack

ROUTER_VERSION = "0.1.17"
#: What the boxes run: every request on the GPU engine (tiny: 8 at once).
BOX = {"system": {"shutdown_grace": 60}, "decider": {"gpu_max_batch_size": 256, "cpu_max_batch_size": 256}}
#: A drain keeps serving what arrives for this long after /health turned 503: ten times the
#: router's health-check interval below (the test waits for the router, not for this).
NOTICE = 10.0
#: Long answers held open on a box: fewer than its 8 slots, so what the router sends still runs.
HELD = 6
#: One line per choice the router makes, with the loads it compared.
SELECTION = re.compile(r"Power-of-two selection: (\S+)=(\d+) vs (\S+)=(\d+) -> selected (\S+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Two stacks and a router start for each test: on a busy machine longer than the suite's
#: default bound for a hung test.
pytestmark = pytest.mark.timeout(600)


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
    router_log: Path

    def seen_loads(self) -> list[dict[str, int]]:
        """The loads the router compared, choice by choice (worker URL -> load)."""
        text = ANSI.sub("", self.router_log.read_text(errors="replace"))
        return [{m[1]: int(m[2]), m[3]: int(m[4])} for m in SELECTION.finditer(text)]

    def warm_until(self, check: Callable[[dict[str, int]], bool], limit: int = 600) -> None:
        """Send small requests through the router until one of its choices saw loads that pass
        ``check`` (its /get_load poll runs on its own clock, and only a choice shows it)."""
        for _ in range(limit):
            _, answer = self.chat()
            assert answer.status_code == 200, answer.text
            loads = self.seen_loads()
            if loads and check(loads[-1]):
                return
        raise AssertionError(f"the router never saw the loads asked for; last: {self.seen_loads()[-3:]}")

    def chat(self, max_tokens: int = 4, stream: bool = False, via: str | None = None) -> tuple[str, httpx.Response]:
        """One chat request through the router (or straight to ``via``); its id and answer."""
        rid = uuid.uuid4().hex
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": stream,
                "ignore_eos": True}
        answer = httpx.post(f"{via or self.router}/v1/chat/completions", json=body,
                            headers={"X-Request-ID": rid}, timeout=60)
        return rid, answer


@pytest.fixture
def make_fleet(make_stacks: Callable[[str], Callable[..., Stack]], tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """Two boxes on simulated engines (real time) behind vllm-router with ``power_of_two``;
    ``make_fleet(notice)``: box A drains with that notice."""
    routers: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []

    def make(notice: float = 0.0) -> Fleet:
        a = make_stacks("a")(policy="gpu-only", speed=1.0,
                             config={**BOX, "system": {**BOX["system"], "drain_notice": notice}})
        b = make_stacks("b")(policy="gpu-only", speed=1.0, config=BOX)
        port = free_port()
        log = open(tmp_path / "router.log", "wb")  # noqa: SIM115 - closed at teardown
        logs.append(log)
        router = subprocess.Popen(
            [_router_binary(), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", a.url, b.url,
             "--policy", "power_of_two", "--worker-startup-check-interval", "1", "--health-check-interval-secs", "1",
             "--health-failure-threshold", "1", "--health-success-threshold", "1", "--log-level", "warning",
             "--prometheus-port", str(free_port())], stdout=log, stderr=subprocess.STDOUT)
        routers.append(router)
        wait_http(f"http://127.0.0.1:{port}/health", proc=router, timeout=60)
        return Fleet(a, b, f"http://127.0.0.1:{port}", tmp_path / "router.log")

    try:
        yield make
    finally:
        stop_processes(routers)
        for log in logs:
            log.close()


@pytest.fixture
def fleet(make_fleet: Callable[..., Fleet]) -> Fleet:
    """A fleet whose boxes close at once when stopped."""
    return make_fleet()


def _served(stack: Stack) -> set[str]:
    """The request ids a box's access log names."""
    return {word[3:] for line in stack.log_text().splitlines() if "request id=" in line
            for word in line.split() if word.startswith("id=")}


@contextlib.contextmanager
def _held(stack: Stack, count: int, max_tokens: int = 2000) -> Iterator[None]:
    """``count`` long streamed requests straight to a box, left unread (the daemon holds them);
    leaving the block closes them, as clients that go away do, and the box lets go of them."""
    host, port = stack.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    with contextlib.ExitStack() as sockets:
        for _ in range(count):
            sock = sockets.enter_context(socket.create_connection((host, int(port)), timeout=60))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
        assert wait_until(lambda: _load(stack) >= count, timeout=60)
        yield
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0, timeout=60)


def _stream(url: str, results: list[tuple[bool, str]], max_tokens: int) -> None:
    """A streamed chat request straight to ``url``: (ended with [DONE], its text)."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as answer:
        text = "".join(answer.iter_text())
    results.append((answer.status_code == 200 and "data: [DONE]" in text, text[-200:]))


def _load(stack: Stack) -> int:
    return int(httpx.get(f"{stack.url}/get_load", timeout=10).json()["load"])


def _where(fleet: Fleet, rid: str) -> str:
    """Which box served a request (each logs it just after its answer)."""
    assert wait_until(lambda: rid in _served(fleet.a) | _served(fleet.b), timeout=60), rid
    return "a" if rid in _served(fleet.a) else "b"


def test_a_busy_box_gets_fewer_requests_and_its_gauges_say_why(fleet: Fleet) -> None:
    # Box A's GPU gets long streams straight from clients of its own (no router).
    with _held(fleet.a, HELD):
        # What the endpoint picker scrapes is what the conductor counts, in the same exposition.
        running = fleet.a.metric("vllm:num_requests_running")
        waiting = fleet.a.metric("vllm:num_requests_waiting")
        assert running + waiting == fleet.a.metric("syshax_inflight") + fleet.a.metric("syshax_queue_depth") >= HELD
        assert fleet.b.metric("vllm:num_requests_running") == 0
        fleet.warm_until(lambda loads: loads[fleet.a.url] >= HELD)  # the router has polled A's load
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: fleet.chat(), range(40)))
        assert all(answer.status_code == 200 for _, answer in answers), [a.text for _, a in answers]
        ids = {rid for rid, _ in answers}
        # Each box logs a request just after its answer: wait for the last lines.
        assert wait_until(lambda: ids <= _served(fleet.a) | _served(fleet.b), timeout=60)
        on_a, on_b = ids & _served(fleet.a), ids & _served(fleet.b)
        assert not on_a & on_b
        print(f"\nsplit A ({HELD} streams running) / B (idle) = {len(on_a)}/{len(on_b)}")
        # power_of_two over two workers compares both: the idle box takes (nearly) everything.
        assert len(on_b) >= 36, f"split A/B = {len(on_a)}/{len(on_b)}"


def test_draining_a_box_moves_new_requests_to_its_peer_and_loses_nothing(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet(NOTICE)
    # B is the busier box, so the router prefers A until it learns that A drains.
    with _held(fleet.b, HELD):
        fleet.warm_until(lambda loads: loads[fleet.b.url] >= HELD)
        streams: list[tuple[bool, str]] = []
        inflight = [threading.Thread(target=_stream, args=(fleet.a.url, streams, 300)) for _ in range(3)]
        for thread in inflight:
            thread.start()
        assert wait_until(lambda: _load(fleet.a) >= 3, timeout=60)
        drained = subprocess.run([str(Path(sys.executable).parent / "syshax"), "drain", "--socket",
                                  str(fleet.a.tmp / "run" / "control.sock")], capture_output=True, text=True,
                                 timeout=60)
        assert drained.returncode == 0, drained.stderr
        assert "503" in drained.stdout
        health = httpx.get(f"{fleet.a.url}/health", timeout=10)
        assert health.status_code == 503 and "draining" in health.json()["reasons"][0]
        # Requests through the router go to A (served: the notice) until its health check sees
        # the 503; from the first one B serves, none reaches A again.
        sent: list[tuple[str, int, str]] = []
        for _ in range(200):
            rid, answer = fleet.chat()
            sent.append((rid, answer.status_code, _where(fleet, rid) if answer.status_code == 200 else "-"))
            moved = [k for k, (_, _, box) in enumerate(sent) if box == "b"]
            if moved and len(sent) - moved[0] >= 5:
                break
        for thread in inflight:
            thread.join(timeout=120)
    assert [s for s in sent if s[1] != 200] == []  # nothing lost
    first_b = next((k for k, s in enumerate(sent) if s[2] == "b"), None)
    assert first_b is not None, f"the router kept sending to the draining box: {sent}"
    assert {box for _, _, box in sent[first_b:]} == {"b"}, sent
    print(f"\n{first_b} request(s) served by A during its notice, then all by B")
    assert len(streams) == 3 and all(ok for ok, _ in streams), [text for ok, text in streams if not ok]
    assert fleet.a.daemon.wait(timeout=120) == 0  # the box exited on its own, cleanly
