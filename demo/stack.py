"""The demo's server side: a simulated GPU/CPU engine pair and a syshaxd in front of it.

Everything lives in one temporary runtime directory (config, control socket, state,
logs) on free loopback ports, and every process is started through the
:class:`~demo.procs.Supervisor`, so nothing outlives the demo.
"""

from __future__ import annotations

import grp
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from demo.llama import find_build, start_server
from demo.ports import free_port
from demo.procs import Child, StartError, StopFlag, Supervisor, wait_until
from syshaxd.config.model import SUN_PATH_MAX

GPU_PROFILE = "gpu-a100"
CPU_PROFILE = "cpu-kunpeng920-q4"
#: The name both llama-servers serve the model under (``--alias``), as vLLM's would be.
LLAMA_MODEL_NAME = "ds-32b"
#: How long the engines and the daemon may take to come up (a busy 2-core machine is slow).
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class StackOptions:
    """What the demo's engines and daemon look like."""

    policy: str = "classic"
    handoff: str = "syshax"
    speed: float = 3.0
    gpu_profile: str = GPU_PROFILE
    cpu_profile: str = CPU_PROFILE
    #: decider keys set in the demo's config file (the batch limits sysHAX ships with).
    decider: tuple[tuple[str, Any], ...] = ()
    monitor_interval: float = 0.5
    engines: str = "sim"  # or "llama": two real llama-servers
    llama_server: str | None = None
    llama_model: str | None = None


@dataclass
class Stack:
    """The running engines and daemon."""

    root: Path
    config_path: Path
    socket_path: Path
    api_url: str
    gpu_url: str
    cpu_url: str
    model: str | None
    engines: tuple[Child, ...]  # the simulator, or the two llama-servers
    daemon: Child

    @property
    def processes(self) -> tuple[Child, ...]:
        """Every server process of the demo, daemon first."""
        return (self.daemon, *self.engines)


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=2.0)
    except httpx.HTTPError:
        return False
    return True


def dialect_for(opts: StackOptions) -> str:
    """The engines' dialect: llama.cpp's for real llama-servers or its slot handoff, else vLLM v1's."""
    return "llamacpp" if opts.engines == "llama" or opts.handoff == "llamacpp-slots" else "vllm-v1"


def sim_command(opts: StackOptions, root: Path) -> list[str]:
    """The simulator pair's command line: free ports chosen by the simulator itself and
    reported in ``root/sim-ready.json`` (no race for a port between choosing and binding)."""
    dialect = dialect_for(opts)
    argv = [
        sys.executable, "-m", "sim", "pair",
        "--gpu-port", "0", "--cpu-port", "0",
        "--gpu-profile", opts.gpu_profile, "--cpu-profile", opts.cpu_profile,
        "--gpu-dialect", dialect, "--cpu-dialect", dialect,
        "--speed", f"{opts.speed:g}", "--ready-file", str(root / "sim-ready.json"),
    ]
    if opts.handoff == "llamacpp-slots":
        (root / "slots").mkdir(exist_ok=True)
        argv += ["--slot-save-path", str(root / "slots")]
    return argv


def read_ready(path: Path) -> dict[str, str] | None:
    """The engines' URLs by name ("gpu", "cpu") from the simulator's ready file, once written."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(e["name"]): str(e["url"]) for e in data["engines"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def served_model(url: str) -> str | None:
    """The first model an engine serves (``GET /v1/models``), if it says."""
    try:
        data = httpx.get(f"{url}/v1/models", timeout=5.0).json().get("data", [])
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _group_name() -> str:
    # The control socket's group: the demo user's own, so no warning about a missing
    # "syshax" group and nobody else on the machine can connect.
    try:
        return grp.getgrgid(os.getegid()).gr_name
    except KeyError:
        return str(os.getegid())


def control_socket(root: Path) -> Path:
    """Where the demo's daemon listens for the console."""
    return root / "run" / "control.sock"


def runtime_root() -> Path:
    """A fresh runtime directory in ``$TMPDIR``, or in /tmp when a socket path there would be
    too long for AF_UNIX (a deep ``$TMPDIR``, e.g. macOS's /var/folders/... or a CI workspace)."""
    root = Path(tempfile.mkdtemp(prefix="syshax-demo-"))
    if len(bytes(control_socket(root))) <= SUN_PATH_MAX:
        return root
    root.rmdir()
    return Path(tempfile.mkdtemp(prefix="syshax-demo-", dir="/tmp"))


def demo_config(opts: StackOptions, root: Path, ports: dict[str, int], model: str | None) -> dict[str, Any]:
    """The config file the demo's syshaxd runs with."""
    decider: dict[str, Any] = {"policy": opts.policy, **dict(opts.decider)}
    dialect = dialect_for(opts)
    config: dict[str, Any] = {
        "services": {
            "gpu": {"port": ports["gpu"], "handoff": opts.handoff, "name": "gpu0", "dialect": dialect},
            "cpu": {"port": ports["cpu"], "handoff": opts.handoff, "name": "cpu0", "dialect": dialect},
            "conductor": {"host": "127.0.0.1", "port": ports["api"]},
        },
        "decider": decider,
        "monitor": {"interval": opts.monitor_interval, "scrape_timeout": 2.0},
        "system": {"request_timeout": 300, "shutdown_grace": 3, "max_queue_size": 200},
        "control": {
            "socket": str(control_socket(root)),
            "group": _group_name(),
            "state_dir": str(root / "state"),
        },
        "logging": {"level": "info"},
    }
    if model:
        config["models"] = {"default": model}
    return config


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _engines_up(api_url: str) -> bool:
    try:
        body = httpx.get(f"{api_url}/health", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return False
    engines = body.get("engines", {}) if isinstance(body, dict) else {}
    return bool(engines) and all(e.get("state") == "up" for e in engines.values())


def start_stack(
    sup: Supervisor, root: Path, opts: StackOptions, env: dict[str, str] | None = None, stop: StopFlag | None = None
) -> Stack:
    """Start the engines and syshaxd under ``root``; return when syshaxd sees both engines up.

    Raises:
        StartError: a process exited or did not answer in time (the message has its log's end).
        Interrupted: ``stop`` was set meanwhile.
    """
    (root / "run").mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(exist_ok=True)
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    base_env = {k: v for k, v in (env or os.environ).items() if not k.startswith("SYSHAX_")}
    base_env["XDG_RUNTIME_DIR"] = str(root / "run")
    base_env["COLUMNS"] = "120"  # the simulator's tables in its log

    if opts.engines == "llama":
        engines, gpu_url, cpu_url, model = _start_llama(sup, root, opts, stop)
    else:
        engines, gpu_url, cpu_url, model = _start_sim(sup, root, opts, base_env, stop)

    ports = {"gpu": _port(gpu_url), "cpu": _port(cpu_url), "api": free_port()}
    config = demo_config(opts, root, ports, model)
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    daemon = sup.start(
        "syshaxd", [sys.executable, "-m", "syshaxd", "--config", str(config_path)],
        log_path=logs / "syshaxd.log", env=base_env,
    )
    api_url = f"http://127.0.0.1:{ports['api']}"
    try:
        wait_until(lambda: _engines_up(api_url), START_TIMEOUT, "syshaxd saw both engines up", daemon, stop=stop)
    except StartError:
        for engine in engines:
            if not engine.alive():
                raise StartError(f"{engine.name} exited with code {engine.proc.returncode}", engine) from None
        raise
    return Stack(
        root=root, config_path=config_path, socket_path=Path(config["control"]["socket"]),
        api_url=api_url, gpu_url=gpu_url, cpu_url=cpu_url, model=model, engines=engines, daemon=daemon,
    )


def _start_sim(
    sup: Supervisor, root: Path, opts: StackOptions, env: dict[str, str], stop: StopFlag | None
) -> tuple[tuple[Child, ...], str, str, str | None]:
    sim = sup.start("simulator", sim_command(opts, root), log_path=root / "logs" / "sim.log", env=env)
    ready = root / "sim-ready.json"
    wait_until(lambda: read_ready(ready) is not None, START_TIMEOUT, "the simulator reported its ports", sim,
               stop=stop)
    urls = read_ready(ready) or {}
    gpu_url, cpu_url = urls["gpu"], urls["cpu"]
    wait_until(lambda: _answers(f"{gpu_url}/health") and _answers(f"{cpu_url}/health"), START_TIMEOUT,
               "the simulated engines answered /health", sim, stop=stop)
    return (sim,), gpu_url, cpu_url, served_model(gpu_url)


def _start_llama(
    sup: Supervisor, root: Path, opts: StackOptions, stop: StopFlag | None
) -> tuple[tuple[Child, ...], str, str, str | None]:
    build = find_build(opts.llama_server, opts.llama_model)
    (root / "slots").mkdir(exist_ok=True)
    gpu, gpu_url = start_server(sup, build, "gpu", root, LLAMA_MODEL_NAME, stop)
    cpu, cpu_url = start_server(sup, build, "cpu", root, LLAMA_MODEL_NAME, stop)
    return (gpu, cpu), gpu_url, cpu_url, served_model(gpu_url) or LLAMA_MODEL_NAME
