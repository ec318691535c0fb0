"""Free loopback ports and waiting for servers (the same helpers the benchmarks use)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench._common import free_port as _kernel_port
from bench._common import stop_processes
from bench._common import wait_http as _wait_http

__all__ = ["free_port", "stop_process", "stop_processes", "wait_http", "wait_until"]


#: Under pytest-xdist each worker ("gw0", "gw1", ...) picks from its own block of ports below
#: the kernel's ephemeral range, so two workers never pick the same port (bind(0) in two
#: processes may, between one picking a port and its server binding it), and no outgoing
#: connection takes a port between the pick and the bind.
_BLOCK = 1500
_LOWEST = 20000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_ports() -> Iterator[int] | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit():
        return None
    start = _LOWEST + int(worker[2:]) * _BLOCK
    if start + _BLOCK > _ephemeral_low():
        return None  # more workers than blocks: the kernel's picks it is
    return itertools.cycle(range(start, start + _BLOCK))


_OWN = _worker_ports()


def free_port() -> int:
    """A free loopback port: this worker's next bindable one under xdist, else the kernel's pick."""
    if _OWN is None:
        return _kernel_port()
    for _ in range(_BLOCK):
        port = next(_OWN)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port in this worker's block ({os.environ.get('PYTEST_XDIST_WORKER')})")


def stop_process(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL: what every test fixture does at teardown."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def wait_http(url: str, timeout: float = 60.0, proc: object | None = None) -> None:
    """Wait until GET ``url`` answers (raises with what happened); a minute by default, as a
    process starting beside a busy suite can take a while."""
    _wait_http(url, timeout=timeout, proc=proc)


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Poll ``check`` every 50 ms until it holds or ``timeout`` passes; returns its last value.

    The timeout only bounds a failure: on a busy machine a condition comes later, not never,
    so it is long and the wait ends as soon as the condition holds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
