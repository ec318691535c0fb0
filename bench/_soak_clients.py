"""The clients of bench/soak.py: streaming clients spread over worker processes (one Python
event loop cannot drive 1,000 streams without lagging itself), the tally of how every request
ended, and the /health latency probe.

A worker is ``soak.py --worker URL ...``: it runs its share of closed-loop clients and prints
one JSON line per half second (its running counts), then a final line with its whole tally.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench._soak_stack import REQUEST_TIMEOUT
from demo.loadgen import Result, stream_chat

#: A client still without an answer this long after the daemon's own timeout is hung.
HANG_MARGIN = 30.0
BODY = {"model": "ds-32b", "messages": [{"role": "user", "content": "soak"}], "ignore_eos": True}


def body(i: int) -> dict[str, Any]:
    """Requests of a few lengths, so streams end at different times."""
    return {**BODY, "max_tokens": (8, 16, 32, 128)[i % 4]}


@dataclass
class Tally:
    """How every request ended."""

    completed: int = 0
    clean_errors: int = 0
    lost: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    ttfts: list[float] = field(default_factory=list)
    lost_examples: list[str] = field(default_factory=list)
    error_examples: dict[str, str] = field(default_factory=dict)  # kind -> its first whole message
    #: Transport steps that failed (httpcore's trace), on a new or a reused connection: why
    #: a lost request was lost.
    transport: Counter[str] = field(default_factory=Counter)
    #: Requests whose connection this client's own pool closed under them before any answer
    #: (encode/httpcore#1110, when the client's loop stalls): retried once, as the openai
    #: client retries connection errors, and reported apart from what the daemon did.
    client_pool_closes: int = 0

    @property
    def total(self) -> int:
        """Requests that ended."""
        return self.completed + self.clean_errors + self.lost

    def add(self, result: Result, started: float) -> None:
        """Count one request that started ``started`` s into the run: whole, clean error, or lost."""
        if result.ok:
            self.completed += 1
            if result.ttft is not None:
                self.ttfts.append(result.ttft)
            return
        if result.lost or not result.error:
            self.lost += 1
            self.kinds[f"LOST: {(result.error or 'neither an answer nor an error')[:60]}"] += 1
            if len(self.lost_examples) < 50:
                self.lost_examples.append(f"started at {started:.1f} s, ended after {result.e2e:.1f} s: "
                                          f"HTTP {result.status}, {result.chunks} chunks, {result.error}")
            return
        self.clean_errors += 1
        kind = f"HTTP {result.status}: {_kind(result.error)}"
        if kind not in self.kinds:
            self.error_examples[kind] = result.error[:300]
        self.kinds[kind] += 1

    def counts(self) -> dict[str, int]:
        """The running counts a worker reports."""
        return {"completed": self.completed, "clean_errors": self.clean_errors, "lost": self.lost}

    def to_json(self) -> dict[str, Any]:
        """Everything, for the worker's final line."""
        return {**self.counts(), "kinds": dict(self.kinds), "ttfts": self.ttfts, "lost_examples": self.lost_examples,
                "transport": dict(self.transport), "error_examples": self.error_examples,
                "client_pool_closes": self.client_pool_closes}

    def merge(self, data: dict[str, Any]) -> None:
        """Add a worker's final tally."""
        self.completed += data["completed"]
        self.clean_errors += data["clean_errors"]
        self.lost += data["lost"]
        self.kinds.update(data["kinds"])
        self.ttfts.extend(data["ttfts"])
        self.lost_examples.extend(data["lost_examples"])
        self.transport.update(data["transport"])
        self.client_pool_closes += data["client_pool_closes"]
        for kind, message in data["error_examples"].items():
            self.error_examples.setdefault(kind, message)

    def tracer(self) -> Callable[[httpx.Request], Awaitable[None]]:
        """An httpx request hook that records failed transport steps into :attr:`transport`."""

        async def on_request(request: httpx.Request) -> None:
            new = False

            async def trace(name: str, info: dict[str, Any]) -> None:
                nonlocal new
                if name == "connection.connect_tcp.started":
                    new = True
                elif name.endswith(".failed"):
                    exc = info.get("exception")
                    if isinstance(exc, asyncio.CancelledError):
                        return  # our own timeout, or the run ending
                    step = name.removesuffix(".failed")
                    cause = exc.__cause__ if exc is not None else None
                    because = f" (from {type(cause).__name__})" if cause is not None else ""
                    self.transport[f"{step} on a {'new' if new else 'reused'} connection: "
                                   f"{type(exc).__name__}: {exc}{because}"[:160]] += 1

            request.extensions["trace"] = trace

        return on_request


def _kind(message: str) -> str:
    """A short, stable kind for an error message: engine names and states kept, details cut."""
    if message.startswith("engine "):
        return message.split(":", 1)[0]
    return re.sub(r"\s*\([^)]*\)", "", message)[:100]


# -- one worker process --------------------------------------------------------------------


async def _load(url: str, clients: int, seconds: float, offset: int) -> Tally:
    tally = Tally()
    # httpx's default keep-alive expiry (5 s), as the OpenAI SDK uses it.
    client = httpx.AsyncClient(timeout=httpx.Timeout(REQUEST_TIMEOUT + HANG_MARGIN),
                               limits=httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8),
                               event_hooks={"request": [tally.tracer()]})
    t0 = time.monotonic()
    deadline = t0 + seconds
    counter = iter(range(offset, 10**9))

    async def worker() -> None:
        while time.monotonic() < deadline:
            started = time.monotonic() - t0
            request = body(next(counter))
            result = await stream_chat(client, f"{url}/v1/chat/completions", request,
                                       timeout=REQUEST_TIMEOUT + HANG_MARGIN)
            if result.client_side and result.chunks == 0:
                tally.client_pool_closes += 1
                result = await stream_chat(client, f"{url}/v1/chat/completions", request,
                                           timeout=REQUEST_TIMEOUT + HANG_MARGIN)
            tally.add(result, started)

    async def report() -> None:
        while True:
            print(json.dumps(tally.counts()), flush=True)
            await asyncio.sleep(0.5)

    reporter = asyncio.create_task(report())
    try:
        await asyncio.gather(*(worker() for _ in range(clients)))
    finally:
        reporter.cancel()
        await client.aclose()
    return tally


def worker_main(url: str, clients: int, seconds: float, offset: int) -> None:
    """Entry point of a worker process: run, then print the final tally as the last line."""
    tally = asyncio.run(_load(url, clients, seconds, offset))
    print(json.dumps({"final": tally.to_json()}), flush=True)


# -- the workers, seen from the driver -----------------------------------------------------


class Workers:
    """``procs`` worker processes sharing ``clients`` clients; live counts and the merged tally."""

    def __init__(self, script: Path, url: str, clients: int, seconds: float, procs: int) -> None:
        self.args = (script, url, clients, seconds, max(1, min(procs, clients)))
        self.live: dict[int, dict[str, int]] = {}
        self.tally = Tally()

    def counts(self) -> dict[str, int]:
        """Sums of the workers' latest counts."""
        out = {"completed": 0, "clean_errors": 0, "lost": 0}
        for counts in self.live.values():
            for key in out:
                out[key] += counts.get(key, 0)
        return out

    async def run(self) -> Tally:
        """Start the workers, follow their counts, and merge their tallies when they end."""
        script, url, clients, seconds, procs = self.args
        shares = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
        started = [
            await asyncio.create_subprocess_exec(
                sys.executable, str(script), "--worker", url, "--clients", str(n), "--duration", str(seconds),
                "--worker-offset", str(i * 10**7), stdout=asyncio.subprocess.PIPE, limit=2**26)
            for i, n in enumerate(shares)
        ]
        await asyncio.gather(*(self._follow(i, proc) for i, proc in enumerate(started)))
        return self.tally

    async def _follow(self, index: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        final = False
        async for line in proc.stdout:
            data = json.loads(line)
            if "final" in data:
                self.tally.merge(data["final"])
                final = True
            else:
                self.live[index] = data
        code = await proc.wait()
        if code != 0 or not final:
            raise RuntimeError(f"soak worker {index} exited with {code} without its tally")


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
            except httpx.HTTPError:
                pass  # counted at its full time: a probe that fails is as slow as it took
            latencies.append(time.perf_counter() - t0)
            time.sleep(interval)
    if out is not None:
        out.write_text(json.dumps(latencies))
