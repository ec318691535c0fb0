"""advise checks itself before it advises: is the window enough, are the profiles these engines', is the
replay of the current setting close to what happened?

Each check that fails is one plain sentence; advise then recommends nothing (``docs/advise.md``):

- the window is too thin or too short: fewer than :data:`MIN_REQUESTS` recorded requests, or
  fewer than :data:`MIN_SECONDS` seconds from the first arrival to the last finish (a p99 of a
  handful of requests is its worst one, and a rate over a second is one burst);
- a profile is not of its engine (:func:`profile_problems`): another simulator profile than the
  one the engine runs, another model than the one the engine serves, or another device than
  the engine's role;
- the replay of the current setting misses what happened by more than the bound
  (:data:`MAX_ERROR`, ``--max-error``) on any figure of :data:`CHECKED`. A latency whose
  prediction is within :data:`LATENCY_FLOOR` seconds of what happened counts as met whatever
  the ratio: at a few milliseconds the daemon's own hop is that large. A p99 over fewer than
  :data:`P99_MIN_REQUESTS` completed requests is one request's fate (nearest rank: the worst or
  the second worst), so it is shown but not judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.advise.window import Measured
from sim.profile import Profile

__all__ = ["CHECKED", "LATENCY_FLOOR", "MAX_ERROR", "MIN_REQUESTS", "MIN_SECONDS", "P99_MIN_REQUESTS", "Bounds", "EngineRole",
           "errors", "judged", "over_bound", "profile_problems", "window_problem"]

#: The largest relative error (predicted - actual) / actual of the current setting's replay on
#: any checked figure that advise accepts before it recommends (0.5: half again or half as much).
MAX_ERROR = 0.5
#: The fewest recorded requests advise recommends from.
MIN_REQUESTS = 30
#: The shortest window (first arrival to last finish), seconds, advise recommends from.
MIN_SECONDS = 10.0
#: The fewest completed requests whose p99 the bound judges.
P99_MIN_REQUESTS = 100
#: Seconds: a latency predicted this close to what happened is met whatever its relative error.
LATENCY_FLOOR = 0.005
#: The figures the self-check compares, key -> the name an operator reads.
CHECKED: dict[str, str] = {
    "goodput": "goodput", "ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "tpot_p50": "TPOT p50",
    "tpot_p99": "TPOT p99", "output_tps": "output tokens/s",
}
_LATENCIES = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")


@dataclass(frozen=True)
class Bounds:
    """What advise accepts before it recommends."""

    max_error: float = MAX_ERROR
    min_requests: int = MIN_REQUESTS
    min_seconds: float = MIN_SECONDS


@dataclass(frozen=True)
class EngineRole:
    """One engine as advise checks a profile against it (None: the engine does not say)."""

    name: str
    device: str
    url: str
    model: str | None  # the first id of its /v1/models
    sim_profile: str | None  # the profile a simulator reports running


def errors(predicted: Measured, actual: Measured) -> dict[str, float]:
    """Relative error of each figure against what happened: (predicted - actual) / actual."""
    out = {}
    for key in (*CHECKED, "throughput"):
        p, a = getattr(predicted, key), getattr(actual, key)
        if p is not None and a is not None and a != 0:
            out[key] = (p - a) / a
    return out


def judged(predicted: Measured, actual: Measured) -> dict[str, float]:
    """The checked figures' errors as the bound judges them: a latency within
    :data:`LATENCY_FLOOR` of what happened counts 0, a figure predicted where none happened inf."""
    out = {}
    for key in CHECKED:
        p, a = getattr(predicted, key), getattr(actual, key)
        if p is None or a is None or (key.endswith("_p99") and actual.completed < P99_MIN_REQUESTS):
            continue
        if key in _LATENCIES and abs(p - a) <= LATENCY_FLOOR:
            out[key] = 0.0
        elif a == 0:
            out[key] = 0.0 if p == 0 else math.inf
        else:
            out[key] = (p - a) / a
    return out


def over_bound(predicted: Measured, actual: Measured, bound: float) -> list[str]:
    """The checked figures whose error exceeds ``bound``, worst first, as "TTFT p50 -88%"."""
    over = [(abs(err), key, err) for key, err in judged(predicted, actual).items() if abs(err) > bound]
    return [f"{CHECKED[key]} {err:+.0%}" if math.isfinite(err) else f"{CHECKED[key]} predicted where none happened"
            for _, key, err in sorted(over, reverse=True)]


def window_problem(actual: Measured, bounds: Bounds) -> str | None:
    """Why the window is too thin or too short to advise on, or None."""
    if actual.requests < bounds.min_requests:
        return (f"{actual.requests} recorded requests are too few to advise on (it takes at least "
                f"{bounds.min_requests}, --min-requests): send more traffic and run advise again")
    if actual.span < bounds.min_seconds:
        return (f"a window of {actual.span:.1f} s is too short to advise on (it takes at least "
                f"{bounds.min_seconds:g} s, --min-seconds): record longer and run advise again")
    return None


def _same_model(profile: str, engine: str) -> bool:
    def norm(name: str) -> str:
        base = name.strip().rstrip("/").rsplit("/", 1)[-1].lower()
        return base.removesuffix(".gguf")

    return norm(profile) == norm(engine)


def profile_problems(roles: Sequence[EngineRole], used: Mapping[str, tuple[str, Profile]]) -> list[str]:
    """Why a profile is not of its engine: one phrase per mismatch (empty: all fit).

    Args:
        used: engine name -> (the profile name or file given, the profile loaded).
    """
    out = []
    for role in roles:
        if role.name not in used:
            continue
        given, profile = used[role.name]
        if role.sim_profile is not None:
            if given != role.sim_profile:
                out.append(f"engine {role.name} simulates profile {role.sim_profile}, not {given}")
            continue
        if role.model is not None and not _same_model(profile.model_name, role.model):
            out.append(f"profile {given} is of model {profile.model_name} but engine {role.name} serves {role.model}")
        if profile.device != role.device:
            out.append(f"profile {given} is a {profile.device} profile but engine {role.name} plays the "
                       f"{role.device} role")
    return out
