"""One workload, live against an engine and in virtual time against a profile.

This is how a calibration is checked: the same requests (arrival times, prompt and output
lengths) go to the real engine through its API and through the simulator's engine core
with the fitted profile, and both sides are summarised alike: TTFT p50, TPOT p50 (per
request, ``(end - first token) / (tokens - 1)``), and output tokens/s over the makespan.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sim.calibrate.probe import new_client, random_prompt, stream_completion
from sim.core import EngineCore, SimRequest
from sim.profile import Profile
from sim.traces import TraceRequest


@dataclass(frozen=True)
class Outcome:
    """One request's latencies, in seconds from its arrival."""

    arrival: float
    output_tokens: int
    ttft: float
    end: float

    @property
    def tpot(self) -> float | None:
        """Mean seconds per token after the first."""
        return (self.end - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else None


@dataclass(frozen=True)
class WorkloadSummary:
    """What a workload came to on one side."""

    requests: int
    ttft_p50: float
    tpot_p50: float
    output_tps: float


def summarise(outcomes: Sequence[Outcome]) -> WorkloadSummary:
    """Medians and throughput of finished requests."""
    start = min(o.arrival for o in outcomes)
    last = max(o.arrival + o.end for o in outcomes)
    tokens = sum(o.output_tokens for o in outcomes)
    tpots = [t for o in outcomes if (t := o.tpot) is not None]
    return WorkloadSummary(len(outcomes), statistics.median(o.ttft for o in outcomes),
                           statistics.median(tpots) if tpots else math.nan, tokens / (last - start))


def simulate(profile: Profile, requests: Sequence[TraceRequest], concurrency: int | None = None) -> list[Outcome]:
    """The requests through one simulated engine core, in virtual time.

    ``concurrency``: closed loop, that many clients each sending its next request when
    its last one finishes (arrival times are ignored); None: at the arrival times.
    """
    core = EngineCore(profile)
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival) if concurrency is None else \
        list(range(len(requests)))
    seqs = []
    nxt = 0

    def send(at: float) -> None:
        nonlocal nxt
        req = requests[order[nxt]]
        seqs.append(core.submit(SimRequest(f"r{order[nxt]}", req.prompt_tokens, req.output_tokens), at=at))
        nxt += 1

    while concurrency is not None and nxt < min(concurrency, len(order)):
        send(0.0)
    while nxt < len(order) or core.has_work():
        upcoming = requests[order[nxt]].arrival if nxt < len(order) and concurrency is None else math.inf
        if not core.has_work():
            core.now = max(core.now, upcoming)
        while concurrency is None and nxt < len(order) and requests[order[nxt]].arrival <= core.now:
            send(requests[order[nxt]].arrival)
        step = core.advance(upcoming) if core.has_work() else None
        if step is not None and concurrency is not None:
            for _ in step.finished:
                if nxt < len(order):
                    send(step.end)
    out = []
    for s in seqs:
        if s.first_token is None or s.finished_at is None:
            raise RuntimeError(f"simulated request {s.req.rid} did not finish")
        out.append(Outcome(s.arrival, s.generated, s.first_token - s.arrival, s.finished_at - s.arrival))
    return out


async def run_live(url: str, model: str, requests: Sequence[TraceRequest], *, concurrency: int | None = None,
                   seed: int | None = None, vocab: int | None = None) -> list[Outcome]:
    """Send the requests (at their arrival times, or ``concurrency`` at a time) and time each answer."""
    rng = random.Random(seed)
    prompts = [random_prompt(rng, r.prompt_tokens, vocab) for r in requests]
    todo = list(range(len(requests)))
    out: list[Outcome] = []
    async with new_client(url) as client:
        start = time.perf_counter() + 0.05

        async def one(i: int) -> None:
            if concurrency is None:
                await asyncio.sleep(max(0.0, start + requests[i].arrival - time.perf_counter()))
            sent = time.perf_counter() - start
            t = await stream_completion(client, model, prompts[i], requests[i].output_tokens)
            out.append(Outcome(sent, t.output_tokens, t.ttft, t.end))

        async def worker() -> None:
            while todo:
                await one(todo.pop(0))

        if concurrency is None:
            await asyncio.gather(*(one(i) for i in todo))
        else:
            await asyncio.sleep(0.05)
            await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out
