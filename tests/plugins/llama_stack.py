"""syshaxd in front of two real llama-servers (GPU role, CPU role), as an operator would run it:
dialect ``llamacpp``, handoff ``llamacpp-slots``. Everything stops on the way out, also on failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.plugins.configs import deep_update
from tests.plugins.daemon import ControlSocket, wait_control_socket
from tests.plugins.llama import (
    BIND_ATTEMPTS,
    N_CTX,
    N_PARALLEL,
    LlamaBuild,
    LlamaServer,
    start_llama_server,
)
from tests.plugins.ports import free_port, stop_process, wait_http


@dataclass
class LlamaStack(ControlSocket):
    """Two real llama-servers (GPU role, CPU role) and a real syshaxd in front of them."""

    gpu: LlamaServer
    cpu: LlamaServer
    daemon: subprocess.Popen[bytes]
    url: str
    socket_path: Path
    config_path: Path
    log_path: Path
    dir: Path
    env: dict[str, str]

    def openai(self, **kwargs: Any) -> Any:
        """The official OpenAI client pointed at the conductor (no retries)."""
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, **kwargs)

    def log_text(self) -> str:
        """What syshaxd logged so far."""
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 60.0) -> str:
        """Until syshaxd's log contains ``text``; returns the log."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log_text()
            if text in log:
                return log
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged within {timeout}s:\n{log[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop syshaxd, then both servers (SIGTERM, SIGKILL when they hang)."""
        stop_process(self.daemon)
        self.gpu.stop()
        self.cpu.stop()



def start_llama_stack(
    build: LlamaBuild,
    work: Path,
    *,
    n_parallel: int = N_PARALLEL,
    n_ctx: int = N_CTX,
    gpu_args: tuple[str, ...] = ("--alias", "gpu-role"),
    cpu_args: tuple[str, ...] = ("--alias", "cpu-role"),
    config: dict[str, Any] | None = None,
) -> LlamaStack:
    """Start the two servers (sharing one slot dir) and syshaxd; wait until both engines are up.

    The aliases make every answer say which server produced it (`model` echoes the alias).
    On any failure everything started so far is stopped.
    """
    slots = work / "slots"
    slots.mkdir(parents=True, exist_ok=True)
    (work / "run").mkdir(exist_ok=True)
    started: list[LlamaServer] = []
    daemon: subprocess.Popen[bytes] | None = None
    try:
        for args in (gpu_args, cpu_args):
            started.append(start_llama_server(build, slots, work, n_parallel=n_parallel, n_ctx=n_ctx,
                                              extra_args=args))
        gpu, cpu = started
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SYSHAX_", "NOTIFY_", "WATCHDOG_", "LISTEN_"))}
        env.update({"RUNTIME_DIRECTORY": str(work / "run"), "STATE_DIRECTORY": str(work / "state")})
        config_path, log_path = work / "config.yaml", work / "syshaxd.log"
        for attempt in range(BIND_ATTEMPTS):
            api_port = free_port()
            data: dict[str, Any] = {
                "services": {
                    "gpu": {"port": gpu.port, "dialect": "llamacpp", "handoff": "llamacpp-slots"},
                    "cpu": {"port": cpu.port, "dialect": "llamacpp", "handoff": "llamacpp-slots"},
                    "conductor": {"port": api_port},
                },
                "decider": {"policy": "classic"},
                "monitor": {"interval": 0.2, "startup_check": False, "scrape_timeout": 1.0},
                "control": {"group": "nogroup"},
                "system": {"request_timeout": 60, "shutdown_grace": 5},
            }
            deep_update(data, config or {})
            config_path.write_text(yaml.safe_dump(data))
            with open(log_path, "wb") as log:
                daemon = subprocess.Popen(
                    [sys.executable, "-m", "syshaxd", "--config", str(config_path)],
                    stdout=log, stderr=subprocess.STDOUT, env=env,
                )
            stack = LlamaStack(gpu, cpu, daemon, f"http://127.0.0.1:{api_port}", work / "run" / "control.sock",
                               config_path, log_path, work, env)
            try:
                wait_http(f"{stack.url}/health", proc=daemon)
                _wait_engines_up(stack)
                return stack
            except (RuntimeError, TimeoutError):
                # Another process (other tests on this machine) took the port between pick and bind.
                lost_port = daemon.poll() is not None and "cannot listen on" in stack.log_text()
                if not lost_port or attempt == BIND_ATTEMPTS - 1:
                    raise
                stop_process(daemon)
        raise AssertionError("unreachable")
    except BaseException:
        if daemon is not None:
            stop_process(daemon)
        for server in started:
            server.stop()
        raise


def _wait_engines_up(stack: LlamaStack, timeout: float = 60.0) -> None:
    # A plain-socket probe first: httpx leaks its socket when connect() to a missing Unix
    # socket fails, and the ResourceWarning fails whichever test the GC happens to run in.
    wait_control_socket(stack.socket_path, stack.daemon, timeout)
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        if stack.daemon.poll() is not None:
            raise RuntimeError(f"syshaxd exited with {stack.daemon.returncode}:\n{stack.log_text()[-3000:]}")
        try:
            states = [e.state for e in stack.state().engines]
        except (httpx.HTTPError, OSError):
            states = []
        if states and all(s == "up" for s in states):
            return
        time.sleep(0.1)
    raise TimeoutError(f"engines not up within {timeout}s: {states}\n{stack.log_text()[-3000:]}")


LlamaStackFactory = Callable[..., LlamaStack]


@contextmanager
def llama_stacks(llama_build: LlamaBuild) -> Iterator[LlamaStackFactory]:
    """Start syshaxd in front of two real llama-servers: `start(n_ctx=, config={...})`.

    Everything stops and the work directory is removed on the way out, also on failure.
    """
    work = Path(tempfile.mkdtemp(prefix="syshax-llama-stack-", dir="/tmp"))
    stacks: list[LlamaStack] = []
    count = [0]

    def start(**kwargs: Any) -> LlamaStack:
        count[0] += 1
        stack = start_llama_stack(llama_build, work / f"s{count[0]}", **kwargs)
        stacks.append(stack)
        return stack

    try:
        yield start
    finally:
        for stack in stacks:
            stack.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def llama_stack(llama_build: LlamaBuild) -> Iterator[LlamaStackFactory]:
    """:func:`llama_stacks` for one test."""
    with llama_stacks(llama_build) as start:
        yield start
