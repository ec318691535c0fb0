"""Start real simulator processes (``python -m sim``) for tests, the demo and benchmarks.

``start_engine(...)`` / ``start_pair(...)`` are context managers: they start the process
(port 0 by default: the simulator binds a free port and reports it through a ready
file, so there is no port race), wait until every engine answers ``/health``, yield
handles with URLs, and on exit stop the process (SIGTERM, then SIGKILL) and remove
their temporary files, even when the body raised.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

STOP_TIMEOUT = 5.0


class LaunchError(RuntimeError):
    """The simulator did not come up."""


@dataclass(frozen=True)
class EngineHandle:
    """One running simulated engine."""

    name: str
    url: str
    port: int
    profile: str
    dialect: str
    engine_id: str

    def set_faults(self, **faults: Any) -> dict[str, Any]:
        """POST /sim/faults with the given fields; returns the engine's current faults."""
        response = httpx.post(f"{self.url}/sim/faults", json=faults, timeout=10)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def clear_faults(self) -> dict[str, Any]:
        """DELETE /sim/faults."""
        response = httpx.delete(f"{self.url}/sim/faults", timeout=10)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def stats(self) -> dict[str, Any]:
        """GET /sim/stats."""
        response = httpx.get(f"{self.url}/sim/stats", timeout=10)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data


@dataclass
class SimProcess:
    """A running simulator process and its engines."""

    proc: subprocess.Popen[bytes]
    engines: dict[str, EngineHandle]
    log_path: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def log(self) -> str:
        """What the process printed so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, wait, then SIGKILL; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        return self.proc.returncode


def fault_args(faults: Mapping[str, Any] | None, flag: str = "--fault") -> list[str]:
    """``--fault KEY=VALUE`` arguments from a mapping (None becomes ``null``, bools lower-case)."""
    out: list[str] = []
    for key, value in (faults or {}).items():
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        out += [flag, f"{key}={text}"]
    return out


def _wait_ready(proc: subprocess.Popen[bytes], ready: Path, log: Path, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LaunchError(f"simulator exited with {proc.returncode} before it was ready:\n{_tail(log)}")
        if ready.exists():
            try:
                data: dict[str, Any] = json.loads(ready.read_text(encoding="utf-8"))
                return data
            except ValueError:
                pass  # being written
        time.sleep(0.02)
    raise LaunchError(f"simulator not ready within {timeout:g}s:\n{_tail(log)}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LaunchError(f"simulator exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.02)
    raise LaunchError(f"{url}/health did not answer within {timeout:g}s: {last}")


@contextlib.contextmanager
def _launch(args: Sequence[str], timeout: float, env: Mapping[str, str] | None) -> Iterator[SimProcess]:
    folder = Path(tempfile.mkdtemp(prefix="syshax-sim-"))
    ready = folder / "ready.json"
    log = folder / "sim.log"
    cmd = [sys.executable, "-m", "sim", *args, "--ready-file", str(ready)]
    proc_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=proc_env)
    sim: SimProcess | None = None
    try:
        data = _wait_ready(proc, ready, log, timeout)
        engines = {
            e["name"]: EngineHandle(e["name"], e["url"], int(e["port"]), e["profile"], e["dialect"], e["engine_id"])
            for e in data["engines"]
        }
        for engine in engines.values():
            _wait_healthy(engine.url, proc, timeout)
        sim = SimProcess(proc, engines, log)
        yield sim
    finally:
        if sim is None:
            sim = SimProcess(proc, {}, log)
        sim.stop()
        for path in (ready, log):
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


def _llama_args(parallel: int | None, ctx_size: int | None, slot_save_path: Path | None) -> list[str]:
    """``-np``, ``-c`` and ``--slot-save-path`` when given."""
    out: list[str] = []
    if parallel is not None:
        out += ["--parallel", str(parallel)]
    if ctx_size is not None:
        out += ["--ctx-size", str(ctx_size)]
    if slot_save_path is not None:
        out += ["--slot-save-path", str(slot_save_path)]
    return out


@contextlib.contextmanager
def start_engine(
    profile: str = "tiny",
    *,
    dialect: str = "vllm-v1",
    speed: float = 1.0,
    port: int = 0,
    host: str = "127.0.0.1",
    served_model_name: str = "ds-32b",
    faults: Mapping[str, Any] | None = None,
    seed: int = 0,
    parallel: int | None = None,
    ctx_size: int | None = None,
    slot_save_path: Path | None = None,
    name: str = "sim",
    extra_args: Sequence[str] = (),
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[SimProcess, EngineHandle]]:
    """Run one simulated engine; yields (process, engine)."""
    args = ["--profile", profile, "--dialect", dialect, "--speed", repr(speed), "--port", str(port), "--host", host,
            "--served-model-name", served_model_name, "--seed", str(seed), "--name", name, *fault_args(faults)]
    args += _llama_args(parallel, ctx_size, slot_save_path)
    with _launch([*args, *extra_args], timeout, env) as sim:
        yield sim, sim.engines[name]


@contextlib.contextmanager
def start_pair(
    *,
    gpu_profile: str = "gpu-a100",
    cpu_profile: str = "cpu-kunpeng920-q4",
    gpu_dialect: str = "vllm-v1",
    cpu_dialect: str = "vllm-v1",
    speed: float = 1.0,
    gpu_port: int = 0,
    cpu_port: int = 0,
    host: str = "127.0.0.1",
    served_model_name: str = "ds-32b",
    gpu_faults: Mapping[str, Any] | None = None,
    cpu_faults: Mapping[str, Any] | None = None,
    seed: int = 0,
    parallel: int | None = None,
    ctx_size: int | None = None,
    slot_save_path: Path | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[SimProcess, EngineHandle, EngineHandle]]:
    """Run a GPU + CPU pair in one process (shared handoff store); yields (process, gpu, cpu)."""
    args = ["pair", "--gpu-profile", gpu_profile, "--cpu-profile", cpu_profile, "--gpu-dialect", gpu_dialect,
            "--cpu-dialect", cpu_dialect, "--speed", repr(speed), "--gpu-port", str(gpu_port), "--cpu-port",
            str(cpu_port), "--host", host, "--served-model-name", served_model_name, "--seed", str(seed),
            *fault_args(gpu_faults, "--gpu-fault"), *fault_args(cpu_faults, "--cpu-fault")]
    args += _llama_args(parallel, ctx_size, slot_save_path)
    with _launch([*args, *extra_args], timeout, env) as sim:
        yield sim, sim.engines["gpu"], sim.engines["cpu"]
