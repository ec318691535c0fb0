"""The accuracy benchmark's baseline: calibrating the simulator recovers the profile it runs.

A real ``python -m sim`` engine (vLLM V1 dialect, speed 1: calibrate times the wall clock)
is calibrated the way ``syshax calibrate URL --base P --decode-tokens 32 --settle 3`` does
it, and the fitted step-model constants are set beside the profile's own. A calibration
that cannot find a known truth again cannot judge a real engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.calibrate.calibrate import Options, calibrate
from sim.calibrate.fit import Constants, constants_of
from sim.launch import start_engine
from sim.profile import load_profile

#: Every recovered constant within this of the profile's.
TOLERANCE = 0.10
#: A made-up engine whose per-sequence and KV-read costs are large enough to see through HTTP.
VISIBLE = Path(__file__).resolve().parent / "profiles" / "calibrate-visible.yaml"
DECODE_TOKENS = 32
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Subject:
    """A profile to recover, and whether its per-sequence and KV terms are measurable."""

    name: str
    profile: str  # a shipped profile's name or a profile file
    all_terms: bool


#: ``tiny``'s per-sequence cost (0.05 ms) and KV reads (0.5 ms at full context) sit on a
#: 10.5 ms step, below what an HTTP client resolves: only its two large terms are judged.
SUBJECTS = (Subject("tiny", "tiny", False), Subject("visible", str(VISIBLE), True))


def terms(got: Constants, want: Constants, all_terms: bool) -> dict[str, tuple[float, float]]:
    """The step-model terms a calibration is judged on: name -> (fitted, the profile's)."""
    pairs = {"prefill s/token": (got.prefill_per_token, want.prefill_per_token),
             "decode step fixed s": (got.decode_base, want.decode_base)}
    if all_terms:
        pairs.update({"per sequence s": (got.per_seq_overhead, want.per_seq_overhead),
                      "per KV token s": (got.kv_per_token, want.kv_per_token)})
    return pairs


def recover(subject: Subject, out: Path, *, settle: float, rounds: int,
            progress: Progress | None = None) -> dict[str, tuple[float, float]]:
    """Start the subject's engine, calibrate it into ``out``, stop it; the judged terms."""
    with start_engine(subject.profile, dialect="vllm-v1", speed=1.0) as (_, engine):
        cal = calibrate(Options(url=engine.url, out=out, base=subject.profile, decode_tokens=DECODE_TOKENS,
                                settle=settle, rounds=rounds), progress)
    return terms(constants_of(cal.profile), constants_of(load_profile(subject.profile)), subject.all_terms)


def judged(found: dict[str, tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """Each term's fitted and true value, relative error and whether it is within TOLERANCE."""
    out: dict[str, dict[str, Any]] = {}
    for name, (got, want) in found.items():
        error = got / want - 1
        out[name] = {"fitted": got, "profile": want, "error": error, "ok": abs(error) <= TOLERANCE}
    return out
