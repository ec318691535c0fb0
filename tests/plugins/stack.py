"""Fixture plugin: a real stack of simulator engines and syshaxd as processes on loopback (make_stack)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.plugins.configs import deep_update
from tests.plugins.ports import free_port, stop_processes, wait_http, wait_until


@dataclass
class Stack:
    """Simulator engines plus a syshaxd in front of them."""

    url: str
    gpu_url: str
    cpu_url: str
    config_path: Path
    tmp: Path
    daemon: subprocess.Popen[bytes]
    engines: list[subprocess.Popen[bytes]]
    log_path: Path
    api_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def openai(self, **kwargs: Any) -> Any:
        """An official OpenAI client pointed at the conductor."""
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key or "unused", max_retries=0, **kwargs)

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a syshax_* sample from the conductor's /metrics matching the labels."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def engine_metric(self, url: str, name: str) -> float:
        """Sum of a metric family's samples on a simulator engine."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{url}/metrics", timeout=5).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name:
                    total += sample.value
        return total

    def log_text(self) -> str:
        """What the daemon logged so far."""
        return self.log_path.read_text(errors="replace")

    def faults(self, url: str, **settings: Any) -> None:
        """Switch simulator faults on an engine (empty: all off)."""
        if settings:
            httpx.post(f"{url}/sim/faults", json=settings, timeout=5).raise_for_status()
        else:
            httpx.delete(f"{url}/sim/faults", timeout=5).raise_for_status()


def _sim_commands(ports: tuple[int, int], profiles: tuple[str, str], dialect: str, speed: float, pair: bool,
                  slot_dir: Path | None) -> list[list[str]]:
    """``python -m sim`` arguments: one process for a pair, else one per engine."""
    (gpu_port, cpu_port), (gpu_profile, cpu_profile) = ports, profiles
    if pair:
        commands = [["pair", "--gpu-port", str(gpu_port), "--cpu-port", str(cpu_port),
                     "--gpu-profile", gpu_profile, "--cpu-profile", cpu_profile, "--speed", str(speed),
                     "--gpu-dialect", dialect, "--cpu-dialect", dialect]]
    else:
        commands = [["--profile", gpu_profile, "--port", str(gpu_port), "--dialect", dialect, "--speed", str(speed)],
                    ["--profile", cpu_profile, "--port", str(cpu_port), "--dialect", dialect, "--speed", str(speed)]]
    if slot_dir is not None:
        commands = [[*command, "--slot-save-path", str(slot_dir)] for command in commands]
    return commands


def _write_config(tmp_path: Path, data: dict[str, Any]) -> Path:
    """The daemon's config: quick scrapes, no startup check, socket and state under ``tmp_path``."""
    defaults: dict[str, Any] = {
        "monitor": {"interval": 0.2, "startup_check": False, "scrape_timeout": 1.0},
        "control": {"socket": str(tmp_path / "run" / "control.sock"), "state_dir": str(tmp_path / "state")},
        "system": {"request_timeout": 60, "shutdown_grace": 5},
    }
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(deep_update(defaults, data)))
    return config_path


#: Put the socket at fd 3 and name this very process in LISTEN_PID, then become the daemon.
_ACTIVATE = ("import os, sys; fd = int(sys.argv[1]); fd != 3 and os.dup2(fd, 3); "
             "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); os.execv(sys.argv[2], sys.argv[2:])")


def _activated(argv: list[str], port: int, log: Any, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` with a listening socket on ``port`` passed as systemd does (fd 3, LISTEN_PID)."""
    with socket.create_server(("127.0.0.1", port), backlog=128) as sock:
        fd = sock.fileno()
        return subprocess.Popen([sys.executable, "-c", _ACTIVATE, str(fd), *argv], pass_fds=(fd,), stdout=log,
                                stderr=subprocess.STDOUT, env=env)


@contextmanager
def _stack_factory(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Start stacks under ``tmp_path``; stop every process they started on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Any] = []

    def start(
        *,
        policy: str = "classic",
        handoff: str = "recompute",
        gpu_profile: str = "tiny",
        cpu_profile: str = "tiny",
        dialect: str = "vllm-v1",
        speed: float = 20.0,
        config: dict[str, Any] | None = None,
        api_key: str | None = None,
        env: dict[str, str] | None = None,
        pair: bool = True,
        slot_dir: Path | None = None,
        engine_ports: tuple[int, int] | None = None,
        activated: bool = False,
    ) -> Stack:
        """Start engines (one process for a pair, else one each) and syshaxd.

        ``slot_dir`` is the engines' ``--slot-save-path`` (llama.cpp dialect, llamacpp-slots).
        ``engine_ports``: GPU and CPU engines the test runs itself (e.g. a fake that records
        what it receives); no simulator is started then. ``activated``: the API socket is made
        here and passed as systemd's socket activation passes it (``LISTEN_FDS``, fd 3, no
        ``SO_REUSEPORT``).
        """
        gpu_port, cpu_port = engine_ports or (free_port(), free_port())
        api_port = free_port()
        sim_log = open(tmp_path / "sim.log", "ab")  # noqa: SIM115 - closed in teardown
        logs.append(sim_log)
        commands = [] if engine_ports is not None else _sim_commands(
            (gpu_port, cpu_port), (gpu_profile, cpu_profile), dialect, speed, pair, slot_dir)
        engines = []
        for command in commands:
            proc = subprocess.Popen([sys.executable, "-m", "sim", *command], stdout=sim_log, stderr=subprocess.STDOUT)
            procs.append(proc)
            engines.append(proc)
        gpu_url, cpu_url = f"http://127.0.0.1:{gpu_port}", f"http://127.0.0.1:{cpu_port}"
        wait_http(f"{gpu_url}/health", proc=engines[0] if engines else None)
        wait_http(f"{cpu_url}/health", proc=engines[-1] if engines else None)
        data: dict[str, Any] = {
            "services": {
                "gpu": {"port": gpu_port, "handoff": handoff, "dialect": dialect},
                "cpu": {"port": cpu_port, "handoff": handoff, "dialect": dialect},
                "conductor": {"port": api_port, "api_key": api_key},
            },
            "decider": {"policy": policy},
        }
        config_path = _write_config(tmp_path, deep_update(data, config or {}))
        log_path = tmp_path / "syshaxd.log"
        daemon_log = open(log_path, "wb")  # noqa: SIM115 - closed in teardown
        logs.append(daemon_log)
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
        run_env.update({"XDG_RUNTIME_DIR": str(tmp_path / "xdg"), **(env or {})})
        argv = [sys.executable, "-m", "syshaxd", "--config", str(config_path)]
        if activated:
            daemon = _activated(argv, api_port, daemon_log, run_env)
        else:
            daemon = subprocess.Popen(argv, stdout=daemon_log, stderr=subprocess.STDOUT, env=run_env)
        procs.append(daemon)
        url = f"http://127.0.0.1:{api_port}"
        wait_http(f"{url}/health", proc=daemon)
        # Let the monitor see both engines once before the test routes anything (a busy machine
        # only makes that come later). Engines a test serves itself may never look up: then the
        # stack is handed over after a minute as it is.
        wait_until(lambda: all(e["state"] == "up" for e in
                               httpx.get(f"{url}/health", timeout=10).json().get("engines", {}).values()), timeout=60)
        return Stack(url, gpu_url, cpu_url, config_path, tmp_path, daemon, engines, log_path, api_key)

    try:
        yield start
    finally:
        stop_processes(procs)
        for handle in logs:
            handle.close()


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Factory: ``make_stack(policy="gpu-only", handoff="recompute", config={...})``."""
    with _stack_factory(tmp_path) as start:
        yield start


@pytest.fixture(scope="module")
def make_module_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Stack]]:
    """The same factory for stacks shared by a module's tests (read-only tests only)."""
    with _stack_factory(tmp_path_factory.mktemp("stack")) as start:
        yield start


@pytest.fixture
def make_stacks(tmp_path: Path) -> Iterator[Callable[[str], Callable[..., Stack]]]:
    """Several stacks in one test, each under its own directory: ``make_stacks("a")(policy=...)``."""
    with contextlib.ExitStack() as stacks:

        def factory(name: str) -> Callable[..., Stack]:
            where = tmp_path / name
            where.mkdir()
            return stacks.enter_context(_stack_factory(where))

        yield factory
