"""Free loopback ports and waiting for servers."""

from __future__ import annotations

import socket
import time

import httpx
import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 30.0, proc: object | None = None) -> None:
    """Wait until GET url answers (any status), or fail with what happened."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        poll = getattr(proc, "poll", None)
        if poll is not None and poll() is not None:
            raise RuntimeError(f"process exited with {poll()} before {url} answered")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError as exc:
            last = exc
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s: {last}")


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
