"""How well a profile reproduces what was measured, per term, as the simulator computes it."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sim import timing
from sim.calibrate.fit import DecodePoint, PrefillPoint
from sim.profile import Profile


@dataclass(frozen=True)
class TermFit:
    """One term's measured points against the profile: R^2 and relative errors."""

    term: str
    points: int
    r2: float
    median_error: float  # median |predicted / measured - 1|
    max_error: float


def term_fit(term: str, measured: Sequence[float], predicted: Sequence[float]) -> TermFit:
    """R^2 and relative errors of ``predicted`` against ``measured``."""
    mean = statistics.fmean(measured)
    total = sum((m - mean) ** 2 for m in measured)
    residual = sum((m - p) ** 2 for m, p in zip(measured, predicted, strict=True))
    errors = [abs(p / m - 1) for m, p in zip(measured, predicted, strict=True)]
    r2 = 1 - residual / total if total > 0 else (1.0 if residual == 0 else 0.0)
    return TermFit(term, len(measured), r2, statistics.median(errors), max(errors))


def profile_fit(profile: Profile, prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint]) -> list[TermFit]:
    """The profile's prefill time vs measured TTFT, and decode step time vs measured TPOT."""
    out = []
    if prefill:
        out.append(term_fit("prefill (TTFT vs prompt length)", [p.ttft_s for p in prefill],
                            [timing.prefill_time(profile, p.prompt_tokens) for p in prefill]))
    if decode:
        out.append(term_fit("decode (step vs batch and context)", [p.step_s for p in decode],
                            [timing.decode_step_time(profile, [round(p.context)] * p.batch) for p in decode]))
    return out
