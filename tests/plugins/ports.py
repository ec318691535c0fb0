"""Free loopback ports and waiting for servers (the same helpers the benchmarks use)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from bench._common import free_port, wait_http

__all__ = ["free_port", "stop_process", "wait_http"]


def stop_process(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL: what every test fixture does at teardown."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
