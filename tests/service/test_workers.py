"""Several processes on the API port (``services.conductor.workers``), one set of books.

Each test runs a real daemon with one worker process beside it on simulated engines: the
kernel spreads new connections over both (SO_REUSEPORT), and whatever process a client
reaches, admission, counts and the access log are the daemon's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.plugins.burst import burst
from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]
TWO = {"services": {"conductor": {"workers": 2}}}


def worker_pids(stack: Stack) -> list[int]:
    """The daemon's worker processes."""
    return [child.pid for child in psutil.Process(stack.daemon.pid).children()
            if "syshaxd.service.worker" in " ".join(child.cmdline())]


def taken(stack: Stack) -> dict[str, float]:
    """Requests each process took, by process ("0" is the daemon)."""
    return {p: stack.metric("syshax_process_requests_total", process=p) for p in ("0", "1")}


def fresh_post(stack: Stack, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    """A request on a connection of its own (so the kernel may hand it to either process)."""
    with httpx.Client(timeout=timeout) as client:
        return client.post(f"{stack.url}/v1/chat/completions", json=body)


class RawStream:
    """A streamed chat on a raw socket: read as it comes, see exactly how it ends."""

    def __init__(self, stack: Stack, max_tokens: int) -> None:
        host, port = stack.url.removeprefix("http://").split(":")
        body = json.dumps({"messages": MESSAGES, "max_tokens": max_tokens, "stream": True,
                           "ignore_eos": True}).encode()
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                          b"content-length: %d\r\n\r\n%s" % (len(body), body))
        self.data = b""

    def read_until(self, marker: bytes) -> bool:
        """Read until ``marker`` arrives (True) or the connection ends (False)."""
        while marker not in self.data:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return False
            if not chunk:
                return False
            self.data += chunk
        return True

    def close(self) -> None:
        self.sock.close()


def stream_on_worker(stack: Stack, max_tokens: int) -> RawStream:
    """A stream the worker (process 1) serves: new connections until the kernel picks it."""
    for _ in range(40):
        before = taken(stack)["1"]
        stream = RawStream(stack, max_tokens)
        assert stream.read_until(b"data: ")
        if taken(stack)["1"] > before:
            return stream
        stream.close()
        assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
    raise AssertionError("40 new connections, none served by the worker")


def test_both_processes_serve_and_the_daemon_keeps_the_books(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", config=TWO)
    assert len(worker_pids(stack)) == 1
    assert asyncio.run(burst(stack.url, 32)) == 32
    counts = taken(stack)
    assert counts["0"] >= 1 and counts["1"] >= 1, counts  # the kernel spread 32 connections over both
    assert counts["0"] + counts["1"] == 32
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
    assert stack.metric("syshax_requests_total", outcome="ok") == 32
    assert wait_until(lambda: stack.log_text().count("syshaxd.access request id=") == 32)  # one log, the daemon's
    # What a worker does not serve itself (the daemon's health, metrics, model list) it
    # forwards: every new connection gets the daemon's own answer.
    for _ in range(12):
        with httpx.Client(timeout=10) as client:
            health = client.get(f"{stack.url}/health")
            assert health.status_code == 200 and set(health.json()["engines"]) == {"gpu0", "cpu0"}
            assert "syshax_process_requests_total" in client.get(f"{stack.url}/metrics").text
            assert client.get(f"{stack.url}/v1/models").json()["data"][0]["id"]
    # The engines' own routes pass through from either process.
    for _ in range(8):
        with httpx.Client(timeout=10) as client:
            response = client.post(f"{stack.url}/tokenize", json={"prompt": "hello there"})
            assert response.status_code == 200 and response.json()["tokens"]


def test_admission_is_one_view_whichever_process_a_client_reaches(make_stack: Callable[..., Stack]) -> None:
    # One GPU slot, no CPU: ten clients on their own connections. Were each process to admit on
    # its own view, two would run at once; the engine must never see more than one.
    stack = make_stack(policy="classic", speed=2.0,
                       config={**TWO, "decider": {"gpu_max_batch_size": 1, "cpu_max_batch_size": 0},
                               "system": {"max_queue_size": 20}})
    results: list[int] = []
    most = [0.0, 0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            most[0] = max(most[0], stack.engine_metric(stack.gpu_url, "vllm:num_requests_running"))
            most[1] = max(most[1], stack.metric("syshax_inflight"))
            time.sleep(0.02)

    def send(i: int) -> None:
        results.append(fresh_post(stack, {"messages": MESSAGES, "max_tokens": 40, "ignore_eos": True}).status_code)

    watcher = threading.Thread(target=watch)
    watcher.start()
    senders = [threading.Thread(target=send, args=(i,)) for i in range(10)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join(90)
    done.set()
    watcher.join()
    assert results == [200] * 10
    assert most == [1.0, 1.0], most
    counts = taken(stack)
    assert counts["0"] >= 1 and counts["1"] >= 1, counts


def test_a_killed_worker_gives_back_its_books_and_is_restarted(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", speed=1.0, config=TWO)
    [pid] = worker_pids(stack)
    stream = stream_on_worker(stack, max_tokens=2000)
    try:
        assert stack.metric("syshax_inflight") == 1
        os.kill(pid, signal.SIGKILL)
        assert not stream.read_until(b"data: [DONE]")  # its client sees the connection end, not a clean finish
    finally:
        stream.close()
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
    assert wait_until(lambda: stack.metric("syshax_requests_total", outcome="worker_lost") == 1)
    assert wait_until(lambda: len(worker_pids(stack)) == 1 and worker_pids(stack) != [pid])
    assert "worker 1" in stack.log_text()
    before = taken(stack)["1"]
    assert asyncio.run(burst(stack.url, 24)) == 24
    assert taken(stack)["1"] > before  # the new worker serves
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)


def test_sigterm_drains_the_streams_a_worker_serves_then_all_exit(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", speed=1.0, config=TWO)
    pids = worker_pids(stack)
    stream = stream_on_worker(stack, max_tokens=60)
    try:
        stack.daemon.send_signal(signal.SIGTERM)
        assert stream.read_until(b"data: [DONE]")  # the worker finishes what it serves
        assert b'"finish_reason":"length"' in stream.data.replace(b" ", b"")
    finally:
        stream.close()
    assert stack.daemon.wait(30) == 0
    assert wait_until(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                                      for pid in pids))
    assert "error" not in stream.data.decode().lower()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_ready_line_says_how_many_processes_serve(make_stack: Callable[..., Stack], workers: int) -> None:
    stack = make_stack(policy="gpu-only", config={"services": {"conductor": {"workers": workers}}})
    assert len(worker_pids(stack)) == workers - 1
    assert wait_until(lambda: f"{workers} process" in stack.log_text())


def test_workers_stop_when_the_daemon_dies(make_stack: Callable[..., Stack]) -> None:
    # Without the books a worker must not serve: when the daemon is killed outright, the
    # worker notices its ledger socket close and exits, and nothing is left on the port.
    stack = make_stack(policy="gpu-only", config=TWO)
    pids = worker_pids(stack)
    private = list({Path(c.laddr) for c in psutil.Process(stack.daemon.pid).net_connections(kind="unix")
                    if c.laddr and c.laddr.endswith("/api.sock")})
    assert len(private) == 1 and private[0].exists()  # the routes workers forward to the daemon
    stack.daemon.kill()
    stack.daemon.wait(10)
    assert wait_until(lambda: not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                                      for pid in pids))
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{stack.url}/health", timeout=5)
    # The killed daemon could not remove its private socket's directory; its worker did.
    assert not private[0].parent.exists()


def test_workers_share_the_socket_systemd_passed(make_stack: Callable[..., Stack]) -> None:
    # Socket activation without ReusePort=yes: one listening socket, passed to the daemon; the
    # worker accepts from that very socket, and every request is answered and counted once.
    stack = make_stack(policy="gpu-only", config=TWO, activated=True)
    assert wait_until(lambda: "the shared API socket" in stack.log_text())
    assert len(worker_pids(stack)) == 1
    assert asyncio.run(burst(stack.url, 32)) == 32
    counts = taken(stack)
    assert counts["0"] + counts["1"] == 32, counts
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
