"""Fixtures of the reliability suite: engines killed and started again on their own port."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.plugins.ports import stop_process, wait_http
from tests.plugins.stack import Stack

Restart = Callable[[Stack, int], subprocess.Popen[bytes]]


@pytest.fixture
def restart_engine(tmp_path: Path) -> Iterator[Restart]:
    """``restart_engine(stack, i)``: start engine process ``i`` again with its own command line.

    The new process replaces ``stack.engines[i]`` and is stopped at teardown (the stack's own
    teardown only knows the processes it started).
    """
    started: list[subprocess.Popen[bytes]] = []
    log = open(tmp_path / "restarted-engines.log", "ab")  # noqa: SIM115 - closed in teardown

    def restart(stack: Stack, index: int) -> subprocess.Popen[bytes]:
        old = stack.engines[index]
        if old.poll() is None:
            old.kill()
            old.wait(timeout=10)
        proc = subprocess.Popen(old.args, stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        stack.engines[index] = proc
        url = stack.gpu_url if index == 0 else stack.cpu_url
        wait_http(f"{url}/health", proc=proc)
        return proc

    yield restart
    for proc in started:
        stop_process(proc, grace=10)
    log.close()

