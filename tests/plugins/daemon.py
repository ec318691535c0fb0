"""Fixture plugin: a real ``syshaxd`` process with simulator engines, as systemd would run it.

``start_daemon(...)`` starts a simulator pair (GPU + CPU engine on free loopback ports) and
syshaxd with ``$RUNTIME_DIRECTORY``/``$STATE_DIRECTORY`` in a temporary directory, so the
control socket lands at ``<tmp>/run/control.sock``. With ``notify=True`` a datagram socket
is bound and passed as ``$NOTIFY_SOCKET`` to record the sd_notify protocol. Teardown stops
every process (SIGTERM, then SIGKILL) and removes the directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from syshaxd.schema import StateModel
from tests.plugins.configs import deep_update
from tests.plugins.ports import free_port, stop_processes, wait_http


class NotifySink:
    """A bound datagram socket standing in for systemd's notify socket; records every message."""

    def __init__(self, path: Path) -> None:
        """Bind at ``path``."""
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[str] = []

    def wait_for(self, field_: str, count: int = 1, timeout: float = 60.0) -> str:
        """Receive until ``count`` messages carried ``field_`` (``READY=1``...); returns the last."""
        deadline = time.monotonic() + timeout
        while True:
            carrying = [m for m in self.messages if field_ in m.split("\n")]
            if len(carrying) >= count:
                return carrying[count - 1]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{field_} not seen {count} time(s) within {timeout}s; got {self.messages}")
            self.sock.settimeout(remaining)
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except TimeoutError:
                continue

    def fields(self) -> list[str]:
        """Every KEY=VALUE received so far, in order."""
        return [f for m in self.messages for f in m.split("\n")]

    def close(self) -> None:
        """Close and remove the socket."""
        self.sock.close()
        self.path.unlink(missing_ok=True)


class ControlSocket:
    """The control API of a running syshaxd, reached over its Unix socket (``socket_path``)."""

    socket_path: Path

    def control(self) -> httpx.Client:
        """A client of the control API over the Unix socket."""
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket_path)), base_url="http://syshaxd", timeout=10
        )

    def state(self) -> StateModel:
        """GET /v1/state."""
        with self.control() as client:
            resp = client.get("/v1/state")
            resp.raise_for_status()
            return StateModel.model_validate(resp.json())


@dataclass
class RunningDaemon(ControlSocket):
    """A syshaxd process, its engines and its files."""

    proc: subprocess.Popen[bytes]
    url: str
    socket_path: Path
    config_path: Path
    state_dir: Path
    dir: Path
    log_path: Path
    gpu_url: str
    cpu_url: str
    env: dict[str, str]
    notify: NotifySink | None = None
    extra: dict[str, Any] = field(default_factory=dict)


    def patch(self, body: dict[str, Any]) -> httpx.Response:
        """PATCH /v1/config."""
        with self.control() as client:
            return client.patch("/v1/config", json=body)

    def log_text(self) -> str:
        """What the daemon logged so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)



def wait_control_socket(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until something accepts connections on ``path`` (fails if ``proc`` exits first).

    Probes with a plain socket: httpx leaks its socket when connect() fails.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"syshaxd exited with {proc.returncode} before its control socket answered")
        if path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
                return
            except OSError:
                pass
            finally:
                probe.close()
        time.sleep(0.05)
    raise TimeoutError(f"control socket {path} did not answer within {timeout}s")


@contextmanager
def successor(daemon: RunningDaemon, log_name: str) -> Iterator[subprocess.Popen[bytes]]:
    """syshaxd started again with ``daemon``'s config, environment and state directory (the old
    process already gone); yields it once its control socket answers, stops it afterwards."""
    log = open(daemon.dir / log_name, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "syshaxd", "--config", str(daemon.config_path)],
                            stdout=log, stderr=subprocess.STDOUT, env=daemon.env)
    try:
        wait_control_socket(daemon.socket_path, proc)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _write_config(tmp: Path, ports: tuple[int, int, int], policy: str, config: dict[str, Any] | None) -> Path:
    """The daemon's config file for engines and API on ``ports`` (gpu, cpu, api), with ``config`` on top."""
    gpu_port, cpu_port, api_port = ports
    data: dict[str, Any] = {
        "services": {
            "gpu": {"port": gpu_port},
            "cpu": {"port": cpu_port},
            "conductor": {"port": api_port},
        },
        "decider": {"policy": policy},
        "monitor": {"interval": 0.2, "startup_check": False, "scrape_timeout": 1.0},
        "control": {"group": "nogroup"},
        "system": {"request_timeout": 60, "shutdown_grace": 10},
    }
    deep_update(data, config or {})
    config_path = tmp / "config.yaml"
    config_path.write_text(yaml.safe_dump(data))
    return config_path


def _daemon_env(tmp: Path) -> dict[str, str]:
    """This environment without syshax's own variables, with systemd's directories under ``tmp``."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("SYSHAX_", "NOTIFY_", "WATCHDOG_", "LISTEN_"))}
    run_env.update({"RUNTIME_DIRECTORY": str(tmp / "run"), "STATE_DIRECTORY": str(tmp / "state")})
    return run_env


@pytest.fixture
def start_daemon() -> Iterator[Callable[..., RunningDaemon]]:
    """Factory: ``start_daemon(config={...}, notify=True, env={...}, speed=20)``.

    ``launcher`` prefixes the command (``["systemd-socket-activate", "-l", ADDR]``);
    ``wait=False`` returns before the control socket answers.
    """
    procs: list[subprocess.Popen[bytes]] = []
    handles: list[Any] = []
    sinks: list[NotifySink] = []
    # Under /tmp and traversable, so a test client that drops to nobody reaches the socket.
    base = Path(tempfile.mkdtemp(prefix="syshaxd-test-", dir="/tmp"))
    base.chmod(0o755)
    counter = [0]

    def start(
        *,
        config: dict[str, Any] | None = None,
        notify: bool = False,
        env: dict[str, str] | None = None,
        speed: float = 20.0,
        profile: str = "tiny",
        policy: str = "classic",
        wait: bool = True,
        launcher: list[str] | None = None,
    ) -> RunningDaemon:
        counter[0] += 1
        tmp = base / f"d{counter[0]}"
        (tmp / "run").mkdir(parents=True)
        (tmp / "run").chmod(0o755)
        gpu_port, cpu_port, api_port = free_port(), free_port(), free_port()
        sim_log = open(tmp / "sim.log", "ab")  # noqa: SIM115 - closed in teardown
        handles.append(sim_log)
        engines = subprocess.Popen(
            [sys.executable, "-m", "sim", "pair", "--gpu-port", str(gpu_port), "--cpu-port", str(cpu_port),
             "--gpu-profile", profile, "--cpu-profile", profile, "--speed", str(speed)],
            stdout=sim_log, stderr=subprocess.STDOUT,
        )
        procs.append(engines)
        gpu_url, cpu_url = f"http://127.0.0.1:{gpu_port}", f"http://127.0.0.1:{cpu_port}"
        wait_http(f"{gpu_url}/health", proc=engines)
        wait_http(f"{cpu_url}/health", proc=engines)
        config_path = _write_config(tmp, (gpu_port, cpu_port, api_port), policy, config)
        run_env = _daemon_env(tmp)
        sink = None
        if notify:
            sink = NotifySink(tmp / "notify.sock")
            sinks.append(sink)
            run_env["NOTIFY_SOCKET"] = str(sink.path)
        run_env.update(env or {})
        log_path = tmp / "syshaxd.log"
        daemon_log = open(log_path, "ab")  # noqa: SIM115 - closed in teardown
        handles.append(daemon_log)
        proc = subprocess.Popen(
            [*(launcher or []), sys.executable, "-m", "syshaxd", "--config", str(config_path)],
            stdout=daemon_log, stderr=subprocess.STDOUT, env=run_env,
        )
        procs.append(proc)
        running = RunningDaemon(
            proc=proc, url=f"http://127.0.0.1:{api_port}", socket_path=tmp / "run" / "control.sock",
            config_path=config_path, state_dir=tmp / "state", dir=tmp, log_path=log_path,
            gpu_url=gpu_url, cpu_url=cpu_url, env=run_env, notify=sink,
        )
        if wait:
            wait_control_socket(running.socket_path, proc)
            _wait_engines_up(running)
        return running

    yield start
    stop_processes(procs)
    for handle in handles:
        handle.close()
    for sink in sinks:
        sink.close()
    shutil.rmtree(base, ignore_errors=True)


def _wait_engines_up(daemon: RunningDaemon, timeout: float = 60.0) -> None:
    """Until the monitor has scraped both engines once, so decisions see real numbers."""
    deadline = time.monotonic() + timeout
    states: list[str] = []
    while time.monotonic() < deadline:
        states = [e.state for e in daemon.state().engines]
        if states and all(s == "up" for s in states):
            return
        time.sleep(0.1)
    raise TimeoutError(f"engines not up within {timeout}s: {states}")


def run_syshaxd(config_path: Path, env: dict[str, str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run a second syshaxd to completion (it should refuse to start)."""
    return subprocess.run(
        [sys.executable, "-m", "syshaxd", "--config", str(config_path)],
        capture_output=True, text=True, env=env, timeout=timeout,
    )
