"""Shared helpers of the benchmark scripts: ports, waiting for servers, the results folder."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from demo.ports import free_port

__all__ = ["free_port", "results_dir", "wait_http"]


def wait_http(url: str, timeout: float = 30.0, proc: object | None = None) -> None:
    """Wait until GET url answers, or raise with what happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        poll = getattr(proc, "poll", None)
        if poll is not None and poll() is not None:
            raise RuntimeError(f"process exited with {poll()} before {url} answered")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def results_dir() -> Path:
    """bench/results, created on demand."""
    path = Path(__file__).resolve().parent / "results"
    path.mkdir(exist_ok=True)
    return path
