"""Free loopback ports and waiting for servers (the same helpers the benchmarks use)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable

import pytest

from bench._common import free_port, wait_http

__all__ = ["free_port", "stop_process", "stop_processes", "wait_http"]


def stop_process(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL: what every test fixture does at teardown."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def stop_processes(procs: Iterable[subprocess.Popen[bytes]], grace: float = 15.0) -> None:
    """SIGTERM every process at once, wait up to ``grace`` seconds for all, then SIGKILL the rest.

    One signal round instead of one process after another: a teardown costs the slowest
    shutdown, not the sum of them.
    """
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
