"""Whether repeated measurements fit the same constants: calibrate repeats until they do.

On a busy machine two calibrations of identical servers fitted 776 and 1,253 µs per decoded
sequence; a profile from one of them is then a guess. calibrate therefore measures in repeats
(each a full plan, :mod:`sim.calibrate.measure`), fits each repeat alone, and stops once the
fits agree: the spread of what they predict -- the TTFT of every measured prompt length and
the step time of every measured decode batch, (max - min) / median over the fits -- is within
:data:`SPREAD`. Predictions are compared rather than the constants one by one: two fits can
share a step's time between the fixed and the per-sequence part differently and still
predict the same (and a constant near zero has no useful relative spread). After
:data:`REPEATS` repeats without agreement calibrate says so, and the profile it writes (fitted
to all repeats together) records that it is not stable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sim.calibrate.fit import Constants, DecodePoint, PrefillPoint, predict_ttft

__all__ = ["REPEATS", "SPREAD", "Stability", "judge"]

#: The largest spread of the repeats' predictions calibrate calls stable (docs/calibrate.md).
SPREAD = 0.20
#: The most repeats calibrate measures before it gives up on agreement (``--repeats``).
REPEATS = 3
#: The constants shown with their range over the repeats, name -> attribute.
SHOWN = {"prefill per token": "prefill_per_token", "decode step, fixed part": "decode_base",
         "decode step, per sequence": "per_seq_overhead", "decode step, per KV token": "kv_per_token"}


def _step(c: Constants, p: DecodePoint) -> float:
    return c.decode_base + c.kv_per_token * p.batch * (p.context + 1) + c.per_seq_overhead * p.batch


@dataclass(frozen=True)
class Stability:
    """The repeats' fits and how far apart their predictions are."""

    fits: tuple[Constants, ...]
    spread: float  # the worst (max - min) / median over the fits of one prediction; inf with one fit
    worst: str  # which prediction spread most, for people
    bound: float = SPREAD

    @property
    def stable(self) -> bool:
        """At least two fits, and their predictions within the bound."""
        return len(self.fits) >= 2 and self.spread <= self.bound

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Each shown constant's smallest and largest value over the fits (seconds)."""
        return {name: (min(getattr(c, attr) for c in self.fits), max(getattr(c, attr) for c in self.fits))
                for name, attr in SHOWN.items()}

    def sentence(self) -> str:
        """One sentence for people."""
        n = len(self.fits)
        if n < 2:
            return ("the fitted constants could not be checked for stability: only one repeat fitted within the "
                    "budget (give it more time with --budget)")
        if self.stable:
            return f"the fitted constants are stable: {n} repeats predict within {self.spread:.0%} of each other"
        return (f"the fitted constants are NOT stable: {n} repeats predict {self.worst} {self.spread:.0%} apart "
                f"(bound {self.bound:.0%}); the machine is likely busy: calibrate again when it is quiet")


def judge(fits: Sequence[Constants], prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint],
          bound: float = SPREAD) -> Stability:
    """How far apart the fits' predictions are at the measured points."""
    if len(fits) < 2:
        return Stability(tuple(fits), float("inf"), "", bound)
    worst, what = 0.0, ""
    checks = [(f"TTFT at {p.prompt_tokens} tokens", [predict_ttft(c, p.prompt_tokens) for c in fits])
              for p in prefill]
    checks += [(f"the step of {p.batch} at context {p.context:.0f}", [_step(c, p) for c in fits]) for p in decode]
    for name, values in checks:
        mid = statistics.median(values)
        if mid > 0 and (spread := (max(values) - min(values)) / mid) > worst:
            worst, what = spread, name
    return Stability(tuple(fits), worst, what, bound)
