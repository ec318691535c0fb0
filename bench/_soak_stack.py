"""What bench/soak.py runs against: two simulator engines and syshaxd, the fault schedule
switched on them during the load, and samples of the daemon's memory and descriptors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from bench._common import free_port, stop_processes, wait_http

#: The daemon answers 504 after this many seconds.
REQUEST_TIMEOUT = 60.0
#: Per device; 1,000 clients leave a few hundred requests queued at any time.
BATCH_LIMIT = 384

# -- engines -------------------------------------------------------------------------------

#: Seconds per engine step in the soak profile: streams of 8 to 128 tokens last about 30 ms
#: to half a second, so a killed engine always has streams to break.
STEP_SECONDS = 4e-3


def soak_profile(tmp: Path) -> Path:
    """The simulator's ``null`` profile (nothing is the bottleneck) with steps that take time."""
    import sim as sim_package

    data = yaml.safe_load((Path(sim_package.__file__).parent / "profiles" / "null.yaml").read_text())
    data["name"] = "soak"
    data["summary"] = "null with 4 ms steps: streams last long enough to be cut"
    data["hardware"]["step_overhead"] = {"value": STEP_SECONDS, "source": "bench/soak.py"}
    path = tmp / "soak-profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Engines:
    """A GPU and a CPU simulator, each its own process so one can be killed and restarted."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.profile = str(soak_profile(tmp))
        self.ports = {"gpu": free_port(), "cpu": free_port()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[Any] = []

    def url(self, device: str) -> str:
        """An engine's base URL."""
        return f"http://127.0.0.1:{self.ports[device]}"

    def _spawn(self, device: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"sim-{device}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        proc = subprocess.Popen([sys.executable, "-m", "sim", "--profile", self.profile,
                                 "--port", str(self.ports[device]), "--name", device, "--log-level", "warning"],
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
        """Set faults on an engine (none given: all off); a dead engine is skipped.

        Raises:
            httpx.HTTPError: the engine did not take the setting.
        """
        if self.procs[device].poll() is not None:
            return
        # Generous: under full load the engine and this process's own loop are both busy.
        async with httpx.AsyncClient(timeout=30) as client:
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
        stop_processes(self.procs.values(), grace=10)
        for log in self._logs:
            log.close()


# -- syshaxd ------------------------------------------------------------------------------


@contextmanager
def stack(tmp: Path, clients: int) -> Iterator[tuple[str, Engines, subprocess.Popen[bytes]]]:
    """Two simulator engines and syshaxd; yields (API url, engines, daemon); stops them all.

    The daemon logs at its default level (info: one access line per request).
    """
    engines = Engines(tmp)
    daemon: subprocess.Popen[bytes] | None = None
    log = open(tmp / "syshaxd.log", "wb")  # noqa: SIM115 - closed below
    try:
        engines.start()
        api = free_port()
        config = {
            "services": {"gpu": {"port": engines.ports["gpu"]}, "cpu": {"port": engines.ports["cpu"]},
                         "conductor": {"port": api}},
            # Batch limits well above the defaults, so most clients stream at once and the
            # rest wait in the admission queue: both paths are under load.
            "decider": {"policy": "classic", "gpu_max_batch_size": BATCH_LIMIT, "cpu_max_batch_size": BATCH_LIMIT},
            "system": {"max_queue_size": clients * 2, "request_timeout": REQUEST_TIMEOUT, "shutdown_grace": 5},
            "monitor": {"startup_check": False},  # default interval and timeouts, as deployed
            "control": {"socket": str(tmp / "control.sock"), "state_dir": str(tmp / "state")},
        }
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
        daemon = subprocess.Popen([sys.executable, "-m", "syshaxd", "--config", str(tmp / "config.yaml")],
                                  stdout=log, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{api}"
        wait_http(f"{url}/health", proc=daemon)
        yield url, engines, daemon
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        engines.stop()
        log.close()


# -- the fault schedule --------------------------------------------------------------------

#: (share of the run, name, action): an action is a dict of faults per device, or "kill"/"restart".
PHASES: list[tuple[float, str, Any]] = [
    (0.00, "clean", {}),
    (0.10, "GPU: 20% of answers fail (500)", {"gpu": {"error_rate": 0.2}}),
    (0.25, "GPU: killed mid-stream", "kill"),
    (0.35, "GPU: restarted", "restart"),
    (0.45, "CPU: garbage; GPU: /metrics lies", {"cpu": {"garbage_body": True}, "gpu": {"metrics": "contradictory"}}),
    (0.60, "GPU: /metrics hangs", {"gpu": {"metrics": "hang"}}),
    (0.75, "clean", {}),
]


def phases(duration: float, kill: bool) -> list[tuple[float, str, Any]]:
    """The schedule in seconds from the start of the load (without the kill for short runs)."""
    return [(share * duration, name, action) for share, name, action in PHASES
            if kill or action not in ("kill", "restart")]


class Chaos:
    """Applies the schedule while the load runs."""

    def __init__(self, engines: Engines, schedule: Sequence[tuple[float, str, Any]], label: str = "") -> None:
        self.engines = engines
        self.schedule = schedule
        self.label = label
        self._phase = "starting"
        self.failures: list[str] = []  # switches that did not take (reported, not fatal)

    @property
    def current(self) -> str:
        """What is switched on now, with the round's label."""
        return f"{self.label}: {self._phase}" if self.label else self._phase

    async def run(self) -> None:
        """Switch faults at their times (relative to now)."""
        t0 = time.monotonic()
        for at, name, action in self.schedule:
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            self._phase = name
            try:
                await self._apply(action)
            except (httpx.HTTPError, OSError, TimeoutError, RuntimeError) as exc:
                self.failures.append(f"{name} at {time.monotonic() - t0:.0f} s: {type(exc).__name__}: {exc}")

    async def _apply(self, action: Any) -> None:
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
