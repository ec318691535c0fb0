"""The console's bound cores are where the CPU engine process really runs (its affinity)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from syshaxd.monitor.affinity import EngineAffinity, local_port
from tests.plugins.ports import free_port, stop_process, wait_http

SERVER = ("import http.server, os, sys; os.sched_setaffinity(0, {int(sys.argv[2])}); "
          "http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), "
          "http.server.SimpleHTTPRequestHandler).serve_forever()")


@pytest.fixture
def pinned_engine() -> Iterator[tuple[str, int]]:
    """A process listening on a free port, pinned to the last CPU this test may use."""
    cpu = max(os.sched_getaffinity(0))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(cpu)], cwd="/",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/", proc=proc)
        yield f"http://127.0.0.1:{port}", cpu
    finally:
        stop_process(proc)


def test_the_affinity_of_the_process_behind_the_url_is_read(pinned_engine: tuple[str, int]) -> None:
    url, cpu = pinned_engine
    assert EngineAffinity([url]).cpus() == (cpu,)


def test_a_remote_engine_or_nobody_listening_gives_no_cores() -> None:
    assert local_port("http://10.1.2.3:8002") is None
    assert EngineAffinity(["http://10.1.2.3:8002"]).cpus() == ()
    assert EngineAffinity([f"http://127.0.0.1:{free_port()}"]).cpus() == ()


def test_an_engine_that_comes_later_is_found_on_a_later_search() -> None:
    clock = [0.0]
    found: list[int | None] = [None]
    affinity = EngineAffinity(["http://127.0.0.1:1"], clock=lambda: clock[0], find=lambda port: found[0])
    assert affinity.cpus() == ()
    found[0] = os.getpid()
    assert affinity.cpus() == ()  # not searched again before FIND_INTERVAL
    clock[0] += 31.0
    assert affinity.cpus() == tuple(sorted(os.sched_getaffinity(0)))
