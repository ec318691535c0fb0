"""Pieces of bench/soak.py: the engines and their faults, the fault schedule, the daemon's
resource samples, the tally of outcomes, and the /health latency probe."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench._common import free_port, wait_http
from syshaxd.loadgen import Result

# -- engines -------------------------------------------------------------------------------


class Engines:
    """A GPU and a CPU simulator, each its own process so one can be killed and restarted."""

    def __init__(self, tmp: Path, profile: str = "null", speed: float = 20.0) -> None:
        self.tmp = tmp
        self.profile = profile
        self.speed = speed
        self.ports = {"gpu": free_port(), "cpu": free_port()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[Any] = []

    def url(self, device: str) -> str:
        """An engine's base URL."""
        return f"http://127.0.0.1:{self.ports[device]}"

    def _spawn(self, device: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"sim-{device}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        proc = subprocess.Popen([sys.executable, "-m", "syshaxd.sim", "--profile", self.profile,
                                 "--port", str(self.ports[device]), "--speed", str(self.speed), "--name", device,
                                 "--log-level", "warning"],
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs[device] = proc
        return proc

    def start(self) -> None:
        """Start both engines and wait until they answer."""
        for device in self.ports:
            self._spawn(device)
        for device, proc in self.procs.items():
            wait_http(f"{self.url(device)}/health", proc=proc)

    def kill(self, device: str) -> None:
        """SIGKILL an engine: a crash, in-flight streams break."""
        proc = self.procs[device]
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    async def restart(self, device: str) -> None:
        """Start a killed engine again on its port and wait until it answers."""
        self.kill(device)
        proc = self._spawn(device)
        await asyncio.to_thread(wait_http, f"{self.url(device)}/health", 30.0, proc)

    async def faults(self, device: str, **settings: Any) -> None:
        """Set faults on an engine (none given: all off); a dead engine is skipped."""
        if self.procs[device].poll() is not None:
            return
        async with httpx.AsyncClient(timeout=5) as client:
            if settings:
                (await client.post(f"{self.url(device)}/sim/faults", json=settings)).raise_for_status()
            else:
                (await client.delete(f"{self.url(device)}/sim/faults")).raise_for_status()

    async def clear_faults(self) -> None:
        """All faults off on both engines."""
        for device in self.ports:
            await self.faults(device)

    def stop(self) -> None:
        """Stop both engines and close their logs."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for log in self._logs:
            log.close()


# -- the fault schedule --------------------------------------------------------------------

#: (share of the run, name, action): an action is a dict of faults per device, or "kill"/"restart".
PHASES: list[tuple[float, str, Any]] = [
    (0.00, "clean", {}),
    (0.15, "GPU: 20% of answers fail (500)", {"gpu": {"error_rate": 0.2}}),
    (0.30, "clean", {}),
    (0.40, "CPU: garbage; GPU: /metrics lies", {"cpu": {"garbage_body": True}, "gpu": {"metrics": "contradictory"}}),
    (0.55, "GPU: /metrics hangs", {"gpu": {"metrics": "hang"}}),
    (0.65, "GPU: killed", "kill"),
    (0.75, "GPU: restarted", "restart"),
    (0.85, "clean", {}),
]


def phases(duration: float, kill: bool) -> list[tuple[float, str, Any]]:
    """The schedule in seconds from the start of the load (without the kill for short runs)."""
    return [(share * duration, name, action) for share, name, action in PHASES
            if kill or action not in ("kill", "restart")]


class Chaos:
    """Applies the schedule while the load runs."""

    def __init__(self, engines: Engines, schedule: Sequence[tuple[float, str, Any]]) -> None:
        self.engines = engines
        self.schedule = schedule
        self.current = "starting"

    async def run(self) -> None:
        """Switch faults at their times (relative to now)."""
        t0 = time.monotonic()
        for at, name, action in self.schedule:
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            self.current = name
            if action == "kill":
                self.engines.kill("gpu")
            elif action == "restart":
                await self.engines.restart("gpu")
            else:
                await self.engines.clear_faults()
                for device, settings in action.items():
                    await self.engines.faults(device, **settings)


# -- what the daemon uses ------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """The daemon's resident memory, open fds and TCP connections at one moment."""

    rss: int
    fds: int
    connections: int

    def as_dict(self) -> dict[str, Any]:
        """For the JSON report."""
        return {"rss_mb": round(self.rss / 2**20, 1), "fds": self.fds, "connections": self.connections}


class Sampler:
    """Samples the daemon every ``interval`` seconds in the background; keeps the peak."""

    def __init__(self, proc: psutil.Process, interval: float = 0.5) -> None:
        self.proc = proc
        self.interval = interval
        self.samples: list[Sample] = []
        self.last: Sample | None = None
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> Sample:
        """One sample now."""
        s = Sample(self.proc.memory_info().rss, self.proc.num_fds(), len(self.proc.net_connections(kind="tcp")))
        self.samples.append(s)
        self.last = s
        return s

    def start(self) -> None:
        """Begin sampling in the background."""
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def peak(self) -> Sample:
        """The largest RSS, fds and connections seen (each its own maximum)."""
        return Sample(max(s.rss for s in self.samples), max(s.fds for s in self.samples),
                      max(s.connections for s in self.samples))


# -- outcomes ------------------------------------------------------------------------------


@dataclass
class Tally:
    """How every request ended."""

    completed: int = 0
    clean_errors: int = 0
    lost: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    ttfts: list[float] = field(default_factory=list)
    lost_examples: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Requests that ended."""
        return self.completed + self.clean_errors + self.lost

    def add(self, result: Result) -> None:
        """Count one request: whole answer, clean error, or anything else (lost)."""
        if result.ok:
            self.completed += 1
            if result.ttft is not None:
                self.ttfts.append(result.ttft)
            return
        if result.lost or not result.error:
            self.lost += 1
            self.kinds[f"LOST: {(result.error or 'neither an answer nor an error')[:60]}"] += 1
            if len(self.lost_examples) < 50:
                self.lost_examples.append(f"HTTP {result.status}, {result.chunks} chunks: {result.error}")
            return
        self.clean_errors += 1
        self.kinds[f"HTTP {result.status}: {_kind(result.error)}"] += 1


def _kind(message: str) -> str:
    """A short, stable kind for an error message (engine names kept, details cut)."""
    head = message.split(":", 1)[0] if message.startswith("engine ") else message
    return head[:60]


# -- the /health probe (runs as its own process) ---------------------------------------------


def health_probe(url: str, seconds: float, out: Path | None, interval: float = 0.05) -> None:
    """GET /health every ``interval`` seconds for ``seconds``; write the latencies (s) as JSON."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=1)) as client:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                client.get(f"{url}/health")
                latencies.append(time.perf_counter() - t0)
            except httpx.HTTPError:
                latencies.append(time.perf_counter() - t0)
            time.sleep(interval)
    if out is not None:
        out.write_text(json.dumps(latencies))
