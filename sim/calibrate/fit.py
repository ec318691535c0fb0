"""Fit the simulator's step-time model to measured TTFT and decode step times.

The simulator (:mod:`sim.timing`) prices one engine step as

    max(alpha*T + beta*A,  w + kappa*K) + s0 + s1*S

for T new tokens, A attention work (``n x (c + n/2)`` per sequence), K KV tokens read and S
scheduled sequences. A lone prompt of n tokens is one compute-bound step (T=n, S=1), so
its TTFT pins ``alpha``, ``beta`` and the intercept; a decoding batch of B sequences at
context c is a memory-bound step (K=B(c+1), S=B), so its step time pins the floor
``D = w + s0``, ``kappa`` and ``s1``. Measured through the engine's API, TTFT also holds a
per-request cost the step model has no term for (HTTP, tokenising, queue hand-over): the
fit keeps it apart as ``api_overhead`` so that it does not bend the engine's constants.
The two intercepts share ``s0``, which the API cannot separate from ``w`` and the API
overhead; the fit gives ``s0`` as much of the prefill intercept as the decode floor allows
while every decode measurement stays memory-bound, so the profile keeps what it can.

Rows the fitted model puts in the other regime (a short prompt under the memory floor, a
big decode batch that turned compute-bound) are left out and the fit repeated, until the
split settles. Fits minimise relative error (weights 1/y^2): a 10 ms and a 1 s measurement
count alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from sim.calibrate.nnls import FitError, nnls
from sim.profile import Profile

__all__ = ["Constants", "DecodePoint", "FitError", "FitResult", "PrefillPoint", "constants_of", "fit", "predict_ttft"]

MIN_POINTS = 2


@dataclass(frozen=True)
class PrefillPoint:
    """A lone prompt: its length and the median time to its first token."""

    prompt_tokens: int
    ttft_s: float
    samples: int = 1


@dataclass(frozen=True)
class DecodePoint:
    """A decoding batch: sequences, mean context per sequence, median seconds per step."""

    batch: int
    context: float
    step_s: float
    samples: int = 1


@dataclass(frozen=True)
class Constants:
    """The step model's constants in seconds (what :mod:`sim.timing` computes from a profile)."""

    prefill_per_token: float  # alpha: s per new token when compute-bound
    attention: float  # beta: s per unit of n x (c + n/2)
    decode_floor: float  # w: s a memory-bound step takes before the KV it reads
    kv_per_token: float  # kappa: s per KV token read
    step_overhead: float  # s0
    per_seq_overhead: float  # s1
    api_overhead: float = 0.0  # r: TTFT the step model does not hold (not simulated)

    @property
    def decode_base(self) -> float:
        """w + s0: the fixed part of a memory-bound step."""
        return self.decode_floor + self.step_overhead


def constants_of(p: Profile) -> Constants:
    """A profile's constants (dense model, no tensor-parallel all-reduce)."""
    flops = p.devices * p.peak_flops * p.compute_efficiency
    bandwidth = p.devices * p.memory_bandwidth * p.memory_efficiency
    return Constants(
        prefill_per_token=p.linear_flops_per_token / flops,
        attention=p.attention_flops_coeff / flops,
        decode_floor=p.weight_bytes / bandwidth,
        kv_per_token=p.kv_bytes_per_token / bandwidth,
        step_overhead=p.step_overhead,
        per_seq_overhead=p.per_seq_overhead,
    )


@dataclass(frozen=True)
class FitResult:
    """The constants, and which measurements the fit used."""

    constants: Constants
    prefill_used: tuple[PrefillPoint, ...]
    decode_used: tuple[DecodePoint, ...]
    prefill_left_out: tuple[PrefillPoint, ...]
    decode_left_out: tuple[DecodePoint, ...]


def _attention(n: float, c: float = 0.0) -> float:
    return n * (c + n / 2)


def _decode_fit(points: Sequence[DecodePoint]) -> tuple[float, float, float]:
    """(D, kappa, s1) from memory-bound decode steps: y = D + kappa*B*(c+1) + s1*B."""
    rows = [[1.0, p.batch * (p.context + 1), float(p.batch)] for p in points]
    ys = [p.step_s for p in points]
    d, kappa, s1 = nnls(rows, ys, [1 / y**2 for y in ys])
    return d, kappa, s1


def _prefill_fit(points: Sequence[PrefillPoint], s1: float) -> tuple[float, float, float]:
    """(alpha, beta, P) from compute-bound lone prompts: y - s1 = alpha*n + beta*n^2/2 + P."""
    rows = [[float(p.prompt_tokens), _attention(p.prompt_tokens), 1.0] for p in points]
    ys = [p.ttft_s - s1 for p in points]
    alpha, beta, intercept = nnls(rows, ys, [1 / p.ttft_s**2 for p in points])
    return alpha, beta, intercept


def _split(alpha: float, beta: float, d: float, kappa: float, s1: float, intercept: float,
           decode: Sequence[DecodePoint]) -> Constants:
    """Share the intercepts between s0, the memory floor w and the API overhead."""
    # w must keep every decode measurement memory-bound, or the simulator would price them
    # on the compute side the decode fit never saw.
    w_min = max([alpha * p.batch + beta * p.batch * (p.context + 0.5) - kappa * p.batch * (p.context + 1)
                 for p in decode] + [0.0])
    s0 = max(0.0, min(intercept, d - w_min))
    return Constants(alpha, beta, d - s0, kappa, s0, s1, max(0.0, intercept - s0))


def _compute_bound(c: Constants, p: PrefillPoint) -> bool:
    n = p.prompt_tokens
    return c.prefill_per_token * n + c.attention * _attention(n) >= c.decode_floor + c.kv_per_token * n


def _memory_bound(c: Constants, p: DecodePoint) -> bool:
    b = p.batch
    compute = c.prefill_per_token * b + c.attention * b * (p.context + 0.5)
    return c.decode_floor + c.kv_per_token * b * (p.context + 1) >= compute * (1 - 1e-9)


def predict_ttft(c: Constants, prompt_tokens: int) -> float:
    """TTFT of a lone prompt under the constants, API overhead included."""
    n = prompt_tokens
    busy = max(c.prefill_per_token * n + c.attention * _attention(n), c.decode_floor + c.kv_per_token * n)
    return busy + c.step_overhead + c.per_seq_overhead + c.api_overhead


def _as_api_overhead(c: Constants) -> Constants:
    """The same fit read with the whole prefill intercept as API overhead (s0 = 0).

    Both readings price compute-bound prompts alike; under the memory floor only this one
    keeps the API's share, which short prompts on a slow-decoding engine show.
    """
    return replace(c, decode_floor=c.decode_base, step_overhead=0.0, api_overhead=c.step_overhead + c.api_overhead)


def _prefill_hinge(prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint],
                   d: float, kappa: float, s1: float) -> tuple[Constants, list[PrefillPoint]]:
    """Fit the compute side on the longest prompts, trying each count of short ones left out.

    Short prompts may sit under the memory floor; the split that predicts *all* prompts
    best (the floor included) wins.
    """
    ordered = sorted(prefill, key=lambda p: p.prompt_tokens)
    best: tuple[float, Constants, list[PrefillPoint]] | None = None
    for k in range(len(ordered) - MIN_POINTS + 1):
        use = ordered[k:]
        alpha, beta, intercept = _prefill_fit(use, s1)
        c = _split(alpha, beta, d, kappa, s1, intercept, decode)
        reading = _as_api_overhead(c)
        if k and not all(_compute_bound(reading, p) for p in use):
            continue
        err = sum((predict_ttft(reading, p.prompt_tokens) / p.ttft_s - 1) ** 2 for p in ordered)
        if best is None or err < best[0] * (1 - 1e-6) - 1e-12:  # ties: leave out fewer
            best = (err, c, use)
    assert best is not None  # k = 0 is always kept
    return best[1], best[2]


def fit(prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint], rounds: int = 8) -> FitResult:
    """Fit the constants; raises :class:`FitError` with too few usable measurements."""
    if len(prefill) < MIN_POINTS or len(decode) < MIN_POINTS:
        raise FitError(f"need at least {MIN_POINTS} prefill and {MIN_POINTS} decode measurements, "
                       f"got {len(prefill)} and {len(decode)}")
    use_d = list(decode)
    for _ in range(rounds):
        d, kappa, s1 = _decode_fit(use_d)
        constants, use_p = _prefill_hinge(prefill, use_d, d, kappa, s1)
        new_d = [p for p in decode if _memory_bound(constants, p)]
        if len(new_d) < MIN_POINTS or new_d == use_d:
            break
        use_d = new_d
    return FitResult(
        constants=constants,
        prefill_used=tuple(use_p), decode_used=tuple(use_d),
        prefill_left_out=tuple(p for p in prefill if p not in use_p),
        decode_left_out=tuple(p for p in decode if p not in use_d),
    )
