"""What bench/attack.py measures: a daemon with an API key in front of simulated engines, a
well-behaved client, and the daemon's memory and descriptors from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from bench._common import free_port, stop_processes, wait_http

KEY = "bench-attack-key"
#: The daemon's open-file limit: a flood reaches its connection cap with ~500 sockets.
NOFILE = 1024
#: The well-behaved client's address (the attackers use 127.0.0.1 and 127.0.1.x).
GOOD = "127.0.0.2"
BODY = {"model": "ds-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}


@dataclass
class Daemon:
    """The processes and where they answer."""

    url: str
    proc: subprocess.Popen[bytes]
    procs: list[subprocess.Popen[bytes]]
    tmp: Path

    def usage(self) -> tuple[float, int]:
        """The daemon's resident memory (MB) and open descriptors now."""
        proc = psutil.Process(self.proc.pid)
        return proc.memory_info().rss / 2**20, proc.num_fds()

    def cpu(self) -> float:
        """CPU seconds the daemon used so far (user and system)."""
        return cpu_seconds(self.proc.pid)


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process used so far (user and system, from /proc)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


@contextmanager
def daemon(limits: dict[str, Any]) -> Iterator[Daemon]:
    """Simulated engines and syshaxd (API key set, ``limits``, :data:`NOFILE` descriptors); stopped on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="syshax-attack-"))
    procs: list[subprocess.Popen[bytes]] = []
    logs = [open(tmp / name, "wb") for name in ("sim.log", "syshaxd.log")]  # noqa: SIM115 - closed below
    try:
        gpu, cpu, api = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "sim", "pair", "--gpu-port", str(gpu), "--cpu-port", str(cpu),
             "--gpu-profile", "tiny", "--cpu-profile", "tiny", "--speed", "20"], stdout=logs[0],
            stderr=subprocess.STDOUT))
        for port in (gpu, cpu):
            wait_http(f"http://127.0.0.1:{port}/health", proc=procs[0])
        config = {"services": {"gpu": {"port": gpu}, "cpu": {"port": cpu},
                               "conductor": {"port": api, "api_key": KEY, "limits": limits}},
                  "decider": {"policy": "gpu-only"},
                  "monitor": {"interval": 0.5, "startup_check": False},
                  "control": {"socket": str(tmp / "control.sock"), "state_dir": str(tmp / "state"), "group": "nogroup"},
                  "logging": {"level": "warning"}}
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
        proc = subprocess.Popen(["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", sys.executable, "-m", "syshaxd",
                                 "--config", str(tmp / "config.yaml")], stdout=logs[1], stderr=subprocess.STDOUT, env=env)
        procs.append(proc)
        url = f"http://127.0.0.1:{api}"
        wait_http(f"{url}/health", proc=proc)
        warm_up(url)
        yield Daemon(url, proc, procs, tmp)
    finally:
        stop_processes(procs)
        for log in logs:
            log.close()
        for path in sorted(tmp.rglob("*"), reverse=True):
            path.unlink() if not path.is_dir() else path.rmdir()
        tmp.rmdir()


def warm_up(url: str) -> None:
    """Ask every route the run uses once, so that what is built on first use (the OpenAPI
    document, the engine connections) is in the baseline, not counted against an attack."""
    with httpx.Client(timeout=30.0, headers={"authorization": f"Bearer {KEY}"}) as client:
        for path in ("/openapi.json", "/health", "/v1/models", "/metrics"):
            client.get(f"{url}{path}").raise_for_status()
        for stream in (False, True):
            client.post(f"{url}/v1/chat/completions", json={**BODY, "stream": stream}).raise_for_status()


@dataclass
class GoodClient:
    """A client with the key, streaming small chat requests one after another on a kept-alive connection."""

    url: str
    ttfts: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Begin sending, in a thread."""
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> tuple[list[float], list[str]]:
        """Stop; the TTFTs (seconds) and failures since :meth:`start`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        return self.ttfts, self.failures

    def _run(self) -> None:
        transport = httpx.HTTPTransport(local_address=GOOD)
        with httpx.Client(transport=transport, timeout=10.0, headers={"authorization": f"Bearer {KEY}"}) as client:
            while not self._stop.is_set():
                self._one(client)

    def _one(self, client: httpx.Client) -> None:
        began = time.perf_counter()
        try:
            with client.stream("POST", f"{self.url}/v1/chat/completions", json=BODY) as response:
                if response.status_code != 200:
                    self.failures.append(f"HTTP {response.status_code}")
                    response.read()
                    time.sleep(0.05)
                    return
                first: float | None = None
                for chunk in response.iter_bytes():
                    if first is None and b"data:" in chunk:
                        first = time.perf_counter() - began
                if first is not None:
                    self.ttfts.append(first)
        except httpx.HTTPError as exc:
            self.failures.append(type(exc).__name__)
            time.sleep(0.05)


def served_after(url: str, patience: float = 30.0) -> float | None:
    """Seconds until a new connection from the attackers' address gets a chat answer (None: never)."""
    began = time.perf_counter()
    while time.perf_counter() - began < patience:
        try:
            with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=2.0) as client:
                response = client.post(f"{url}/v1/chat/completions", json={**BODY, "stream": False},
                                       headers={"authorization": f"Bearer {KEY}"})
            if response.status_code == 200:
                return time.perf_counter() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.01)
    return None


def refusals(url: str) -> dict[str, float]:
    """The edge's refusal counters from /metrics, by reason (connections and requests together)."""
    from prometheus_client.parser import text_string_to_metric_families

    with httpx.Client(transport=httpx.HTTPTransport(local_address=GOOD), timeout=10.0) as client:
        text = client.get(f"{url}/metrics").text
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("syshax_http_connections_refused_total", "syshax_http_requests_refused_total"):
                counts[sample.labels["reason"]] = counts.get(sample.labels["reason"], 0.0) + sample.value
    return counts
