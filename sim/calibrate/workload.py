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

from sim.calibrate.probe import Timing, new_client, random_prompt, stream_completion
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


def simulate(profile: Profile, requests: Sequence[TraceRequest]) -> list[Outcome]:
    """The requests through one simulated engine core, in virtual time."""
    core = EngineCore(profile)
    pending = sorted(enumerate(requests), key=lambda x: (x[1].arrival, x[0]))
    seqs = []
    i = 0
    while i < len(pending) or core.has_work():
        upcoming = pending[i][1].arrival if i < len(pending) else math.inf
        if not core.has_work():
            core.now = max(core.now, upcoming)
        while i < len(pending) and pending[i][1].arrival <= core.now:
            index, req = pending[i]
            seqs.append(core.submit(SimRequest(f"r{index}", req.prompt_tokens, req.output_tokens), at=req.arrival))
            i += 1
        if core.has_work():
            core.advance(upcoming)
    out = []
    for s in seqs:
        if s.first_token is None or s.finished_at is None:
            raise RuntimeError(f"simulated request {s.rid} did not finish")
        out.append(Outcome(s.arrival, s.generated, s.first_token - s.arrival, s.finished_at - s.arrival))
    return out


async def run_live(url: str, model: str, requests: Sequence[TraceRequest], *, seed: int | None = None,
                   vocab: int | None = None) -> list[Outcome]:
    """Send the requests at their arrival times and time each answer."""
    rng = random.Random(seed)
    prompts = [random_prompt(rng, r.prompt_tokens, vocab) for r in requests]
    async with new_client(url) as client:
        start = time.perf_counter() + 0.05

        async def one(req: TraceRequest, prompt: list[int]) -> tuple[float, Timing]:
            await asyncio.sleep(max(0.0, start + req.arrival - time.perf_counter()))
            sent = time.perf_counter() - start
            return sent, await stream_completion(client, model, prompt, req.output_tokens)

        done = await asyncio.gather(*(one(r, p) for r, p in zip(requests, prompts, strict=True)))
    return [Outcome(sent, t.output_tokens, t.ttft, t.end) for sent, t in done]
