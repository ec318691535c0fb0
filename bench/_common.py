"""Shared helpers of the benchmark scripts (and the tests): ports, waiting for servers, stopping
processes, the results folder."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType

import httpx

from demo.ports import free_port

__all__ = ["free_port", "results_dir", "stop_processes", "wait_http"]


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


def replace_generated(doc: Path, begin: str, end: str, body: str, heading: str = "") -> None:
    """Put ``body`` between the ``begin`` and ``end`` markers of ``doc`` (the prose around them
    stays); a page without them gets them appended, under ``heading`` when given. Written atomically."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = f"{head}{begin}\n{body}{end}{tail}"
    else:
        under = f"{heading}\n\n" if heading else ""
        text = f"{text.rstrip()}\n\n{under}{begin}\n{body}{end}\n"
    tmp = doc.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(doc)


def _unwind(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so every context manager and ``finally`` stops what it
    started (processes, temporary directories) when a benchmark is stopped."""
    signal.signal(signal.SIGTERM, _unwind)
