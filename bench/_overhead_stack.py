"""The processes of the overhead benchmark: a fake engine, syshaxd and vllm-router in front of it.

Also an idle box (syshaxd in front of the simulator, whose ``/metrics`` is as large as a
vLLM's) for what the daemon costs when nothing is asked of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import psutil
import yaml
from rich.console import Console

from bench._common import free_port, stop_processes, wait_http

ROUTER_VERSION = "0.1.17"
HERE = Path(__file__).resolve().parent
console = Console()


def ensure_router() -> str | None:
    """The vllm-router binary, installed into this venv on first use (bench setup only)."""
    found = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or shutil.which("vllm-router")
    if found:
        return found
    console.print(f"[dim]installing vllm-router=={ROUTER_VERSION} (bench only)…[/]")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"vllm-router=={ROUTER_VERSION}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        console.print(f"[red]could not install vllm-router:[/] {done.stderr.strip()[-400:]}")
        return None
    return shutil.which("vllm-router", path=str(Path(sys.executable).parent))


@dataclass
class Stack:
    """What runs: each path's base URL, the proxies' pids, the engine's URL."""

    urls: dict[str, str] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    engine: str = ""

    def proxy_cpu(self, name: str) -> float:
        """CPU seconds (user + system, from /proc) a proxy has used so far, its worker processes
        included; 0 for the direct path."""
        pid = self.pids.get(name)
        if pid is None:
            return 0.0
        process = psutil.Process(pid)
        total = 0.0
        for each in (process, *process.children(recursive=True)):
            times = each.cpu_times()
            total += times.user + times.system
        return total

    def engine_first_bytes(self) -> list[float]:
        """Seconds from each request's arrival to its first byte, as the engine itself measured."""
        data: dict[str, Any] = httpx.get(f"{self.engine}/stats", timeout=10).json()
        return [float(x) for x in data["first_byte_delays"]]


class _Procs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[IO[bytes]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        self.procs.append(proc)
        return proc

    def log_tail(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def stop(self) -> None:
        stop_processes(reversed(self.procs), grace=10)
        for log in self.logs:
            log.close()


def _daemon(procs: _Procs, name: str, gpu: int, cpu: int, workers: int = 1,
            tree: Path | None = None) -> tuple[str, int]:
    """syshaxd in front of the engines (``tree``: the syshaxd of another checkout)."""
    api = free_port()
    config = {
        "services": {"gpu": {"port": gpu}, "cpu": {"port": cpu}, "conductor": {"port": api, "workers": workers}},
        # The proxy is measured, not the policy's limits: no request waits for capacity.
        "decider": {"policy": "gpu-only", "gpu_max_batch_size": 4096, "cpu_max_batch_size": 4096},
        "system": {"max_queue_size": 100_000},
        "monitor": {"startup_check": False},
        "control": {"socket": str(procs.tmp / f"{name}.sock"), "state_dir": str(procs.tmp / f"{name}-state")},
        "logging": {"level": "warning"},
    }
    (procs.tmp / f"{name}.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
    if tree is not None:  # `-m` puts the working directory first on the path: that checkout's package
        env["PYTHONPATH"] = str(tree)
    daemon = procs.start(name, [sys.executable, "-m", "syshaxd", "--config", str(procs.tmp / f"{name}.yaml")], env,
                         cwd=tree)
    try:
        wait_http(f"http://127.0.0.1:{api}/health", proc=daemon)
    except (RuntimeError, TimeoutError) as exc:
        raise RuntimeError(f"syshaxd did not start: {exc}\n{procs.log_tail(name)}") from None
    return f"http://127.0.0.1:{api}", daemon.pid


@contextmanager
def proxies(tmp: Path, router: str | None, ttft: float, interval: float, workers: int = 1,
            tree: Path | None = None) -> Iterator[Stack]:
    """The fake engine, syshaxd (and, with ``workers`` > 1, a second one with that many API
    processes; with ``tree``, the syshaxd of that checkout as the path ``tree``) and (when
    given) vllm-router; all stopped on the way out."""
    procs = _Procs(tmp)
    stack = Stack()
    try:
        port = free_port()
        engine = procs.start("engine", [sys.executable, str(HERE / "_fake_engine.py"), "--port", str(port),
                                        "--ttft", str(ttft), "--interval", str(interval)])
        stack.engine = f"http://127.0.0.1:{port}"
        wait_http(f"{stack.engine}/health", proc=engine)
        stack.urls["direct"] = stack.engine
        stack.urls["syshax"], stack.pids["syshax"] = _daemon(procs, "syshaxd", port, port)
        if workers > 1:
            name = f"syshax-w{workers}"
            stack.urls[name], stack.pids[name] = _daemon(procs, name, port, port, workers)
        if tree is not None:
            stack.urls["tree"], stack.pids["tree"] = _daemon(procs, "tree", port, port, tree=tree)
        if router:
            rport = free_port()
            rproc = procs.start("vllm-router", [router, "--host", "127.0.0.1", "--port", str(rport), "--worker-urls",
                                                stack.engine, "--policy", "round_robin", "--log-level", "error",
                                                "--prometheus-port", str(free_port())])
            try:
                wait_http(f"http://127.0.0.1:{rport}/health", proc=rproc, timeout=60)
            except (RuntimeError, TimeoutError) as exc:
                raise RuntimeError(f"vllm-router did not start: {exc}\n{procs.log_tail('vllm-router')}") from None
            stack.urls["vllm-router"] = f"http://127.0.0.1:{rport}"
            stack.pids["vllm-router"] = rproc.pid
        yield stack
    finally:
        procs.stop()


def idle_cost(tmp: Path, seconds: float) -> dict[str, float]:
    """syshaxd's CPU while nothing is asked of it, in front of two simulated vLLM engines."""
    procs = _Procs(tmp)
    try:
        gpu, cpu = free_port(), free_port()
        sim = procs.start("idle-sim", [sys.executable, "-m", "sim", "pair", "--gpu-port", str(gpu),
                                       "--cpu-port", str(cpu)])
        wait_http(f"http://127.0.0.1:{gpu}/health", proc=sim)
        wait_http(f"http://127.0.0.1:{cpu}/health", proc=sim)
        url, pid = _daemon(procs, "idle-syshaxd", gpu, cpu)
        time.sleep(min(5.0, seconds))  # past the start: the first rounds, the startup check
        process = psutil.Process(pid)
        before, t0 = sum(process.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        used, wall = sum(process.cpu_times()[:2]) - before, time.monotonic() - t0
        return {"seconds": round(wall, 1), "cpu_ms_per_s": round(used * 1000 / wall, 2),
                "core_percent": round(100 * used / wall, 3)}
    finally:
        procs.stop()
