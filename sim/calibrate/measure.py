"""The measurement plan and its run: lone prompts of growing length, decoding batches.

A plan is rounds of probes; the first round measures every point once, later rounds
repeat them while the time budget lasts (medians of repeats are what the fit sees, so a
noisy machine costs accuracy, not correctness). Probes run one at a time: a calibration
measures the engine alone.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.calibrate.engine_info import EngineFacts
from sim.calibrate.fit import DecodePoint, PrefillPoint
from sim.calibrate.probe import Timing, batch, new_client, random_prompt, stream_completion

PREFILL_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 1.0)
SHORT_PROMPT = 16

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Probe:
    """One measurement: ``batch`` prompts of ``prompt`` tokens, ``tokens`` output tokens each."""

    kind: str  # prefill or decode
    batch: int
    prompt: int
    tokens: int

    @property
    def label(self) -> str:
        """What the progress bar says."""
        if self.kind == "prefill":
            return f"prefill {self.prompt} tokens"
        return f"decode batch {self.batch} at context {self.prompt}"


@dataclass(frozen=True)
class Plan:
    """Prefill and decode probes, and how many rounds of each to try."""

    prefill: tuple[Probe, ...]
    decode: tuple[Probe, ...]
    rounds: int = 3  # at least this many measurements of each point, budget permitting


def make_plan(facts: EngineFacts, *, max_prompt: int, max_batch: int, decode_tokens: int, rounds: int = 3) -> Plan:
    """Prompt lengths up to ``max_prompt``; batches 1, 2, 4, ... up to ``max_batch``, short and long contexts."""
    context = facts.max_model_len or max_prompt + decode_tokens
    top = max(8, min(max_prompt, context - 2))
    lengths = sorted({max(8, round(f * top)) for f in PREFILL_FRACTIONS})
    prefill = tuple(Probe("prefill", 1, n, 1) for n in lengths)
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b < max_batch] + [max_batch]
    decode = [Probe("decode", b, SHORT_PROMPT, decode_tokens) for b in batches]
    # The context term from three points, not one: alone at 3/8 and 3/4 of the context,
    # and two at 3/4 (served traffic decodes several long sequences together). With a
    # single point one noisy median could set the term to zero, and the simulator would
    # then decode long contexts as fast as short ones.
    long_prompt = min(context - decode_tokens - 2, top) * 3 // 4
    if long_prompt >= 4 * SHORT_PROMPT:
        decode.append(Probe("decode", 1, long_prompt, decode_tokens))
        decode.append(Probe("decode", 1, long_prompt // 2, decode_tokens))
        if max_batch >= 2:
            decode.append(Probe("decode", 2, long_prompt, decode_tokens))
    return Plan(prefill, tuple(decode), rounds)


def common_window(run: list[Timing]) -> list[tuple[float, float]]:
    """Per request of one batch: (seconds per token, mean context) while all were decoding.

    Requests of a batch start apart (their prompts are prefilled in turn), so only the
    stretch where every one of them streams is a step of the whole batch.
    """
    start = max(t.sent_at + t.token_times[0] for t in run)
    end = min(t.sent_at + t.token_times[-1] for t in run)
    out = []
    for t in run:
        inside = [i for i, x in enumerate(t.token_times) if start - 1e-9 <= t.sent_at + x <= end + 1e-9]
        if len(inside) >= 3:
            first, last = inside[0], inside[-1]
            gap = (t.token_times[last] - t.token_times[first]) / (last - first)
            out.append((gap, t.prompt_tokens + (first + last) / 2 + 1))
    return out


BURST = 0.25  # a window this far under its probe's median gap came in one read


def _steady(windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The windows without read bursts.

    A client that falls behind (it shares the cores with the engine) reads a whole
    stream's buffered tokens at once: that request's gaps come out near zero (measured
    on llama-server: 0.01-0.05 ms per token against 0.75 ms). Such windows time the
    client, not the engine; with the few repeats of a short calibration, two of them
    could set the median, and a context term measured at one point with it.
    """
    if len(windows) < 2:
        return windows
    typical = statistics.median(g for g, _ in windows)
    return [w for w in windows if w[0] >= BURST * typical]


@dataclass
class Measurements:
    """What the probes saw, grouped by probe."""

    started_at: float  # Unix time
    duration: float = 0.0
    samples: dict[Probe, list[list[Timing]]] = field(default_factory=dict)  # runs of each probe
    skipped: int = 0  # probes the budget left out

    def prefill_points(self) -> list[PrefillPoint]:
        """Median TTFT per prompt length."""
        out = []
        for probe, runs in self.samples.items():
            timings = [t for run in runs for t in run]
            if probe.kind == "prefill" and timings:
                n = int(statistics.median(t.prompt_tokens for t in timings))
                out.append(PrefillPoint(n, statistics.median(t.ttft for t in timings), len(timings)))
        return sorted(out, key=lambda p: p.prompt_tokens)

    def decode_points(self) -> list[DecodePoint]:
        """Median seconds per output token per batch and context."""
        out = []
        for probe, runs in self.samples.items():
            if probe.kind != "decode":
                continue
            windows = _steady([w for run in runs for w in common_window(run)])
            if windows:
                out.append(DecodePoint(probe.batch, statistics.median(c for _, c in windows),
                                       statistics.median(g for g, _ in windows), len(windows)))
        return sorted(out, key=lambda p: (p.context, p.batch))


def _length(probe: Probe, rng: random.Random) -> int:
    """A prompt length near the probe's: llama.cpp sets up its compute graph again for a batch
    of a new shape, and real prompts rarely repeat a length, so neither do the probes'."""
    if probe.kind != "prefill":
        return probe.prompt
    return max(8, round(probe.prompt * rng.uniform(0.85, 1.0)))


async def run_plan(facts: EngineFacts, plan: Plan, *, budget: float, settle: float = 0.0,
                   progress: Progress | None = None, seed: int | None = None) -> Measurements:
    """Run the plan's rounds, then more while under ``settle`` seconds; stop at ``budget`` seconds.

    A fast engine finishes its rounds in a second or two, and a second of someone else's
    load then skews every median: ``settle`` spends more time to average it out.
    ``progress`` gets the probe's label and the time-or-rounds fraction done, in percent.
    """
    rng = random.Random(seed)
    probes = [*plan.prefill, *plan.decode]
    result = Measurements(started_at=time.time())
    start = time.monotonic()
    goal = max(settle, 1e-9)
    rounds = 0
    async with new_client(facts.url) as client:
        await stream_completion(client, facts.model, random_prompt(rng, SHORT_PROMPT, facts.vocab_size), 4)
        while rounds < plan.rounds or time.monotonic() - start < settle:
            for i, probe in enumerate(probes):
                elapsed = time.monotonic() - start
                if elapsed > budget:
                    result.skipped = (plan.rounds - rounds) * len(probes) - i if rounds < plan.rounds else 0
                    result.duration = elapsed
                    return result
                if progress:
                    done = max((rounds + i / len(probes)) / plan.rounds, elapsed / goal)
                    progress(probe.label, min(99, int(100 * done)), 100)
                prompts = [random_prompt(rng, _length(probe, rng), facts.vocab_size) for _ in range(probe.batch)]
                timings = await batch(client, facts.model, prompts, probe.tokens)
                result.samples.setdefault(probe, []).append(timings)
            rounds += 1
    if progress:
        progress("done", 100, 100)
    result.duration = time.monotonic() - start
    return result
