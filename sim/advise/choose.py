"""From predictions to advice: the ranking, the ties, the recommendation in one sentence.

Ranking first separates options by the operator's targets (goodput: requests/s meeting the
TTFT and TPOT targets); among the options tied on goodput, when every one of them serves every
request within the targets, by latency (TTFT p99); then by cost, the change it takes: the
current setting costs nothing, then the simplest (gpu-only before classic before adaptive,
auto-PD off before on, fewer changed keys). Two options are tied when they differ by less
than advise's own error on that figure (the self-check's error on the current setting, see
:mod:`sim.advise.check`) or by less than noise, the larger of :data:`NOISE_SHARE` of the
figure and, for goodput, :data:`NOISE_REQUESTS` requests over the window (a replay moves by
about that much when one request's fate flips).

When GPU-only is among the best (tied), the CPU cannot help this traffic: advise says so and
recommends GPU-only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.advise.check import LATENCY_FLOOR
from sim.advise.options import Setting
from sim.advise.predict import Prediction
from sim.advise.window import Measured
from syshaxd.schema import AdviceModel, AdviceOption, duration

__all__ = ["NOISE_REQUESTS", "NOISE_SHARE", "Choice", "advice", "choose", "noise"]

NOISE_SHARE = 0.05
NOISE_REQUESTS = 2


@dataclass(frozen=True)
class Choice:
    """The recommended option (an index into the predictions), the options tied with it, why."""

    index: int
    cpu_helps: bool
    summary: str
    tied: tuple[int, ...] = ()


def noise(goodput: float, span: float) -> float:
    """How much two predicted goodputs may differ and still count as equal (requests/s)."""
    return max(NOISE_SHARE * goodput, NOISE_REQUESTS / span if span > 0 else 0.0)


def _meets_all(m: Measured) -> bool:
    """Every request finished and met both targets."""
    return m.completed == m.requests and math.isclose(m.goodput, m.throughput, rel_tol=1e-9)


def _best(predictions: Sequence[Prediction], span: float, error: Mapping[str, float]) -> list[int]:
    """The options no other beats by more than the error: on goodput, then on TTFT p99."""
    best = max(p.measured.goodput for p in predictions)
    margin = max(noise(best, span), abs(error.get("goodput", 0.0)) * best)
    tied = [i for i, p in enumerate(predictions) if p.measured.goodput >= best - margin]
    if not all(_meets_all(predictions[i].measured) for i in tied):
        return tied
    ttfts = {i: predictions[i].measured.ttft_p99 for i in tied}
    fastest = min((t for t in ttfts.values() if t is not None), default=None)
    if fastest is None:
        return tied
    slack = max(NOISE_SHARE * fastest, abs(error.get("ttft_p99", 0.0)) * fastest, LATENCY_FLOOR)
    return [i for i in tied if ttfts[i] is not None and ttfts[i] <= fastest + slack]  # type: ignore[operator]


def choose(predictions: Sequence[Prediction], current: Setting, span: float,
           error: Mapping[str, float] | None = None, basis: str = "", gpu_slots: int | None = None) -> Choice:
    """The recommendation among ``predictions`` (one of them must be gpu-only).

    Args:
        error: the self-check's relative errors on the current setting (ties are options
            apart by less).
        basis: appended to the sentence in parentheses: what the advice stands on.
        gpu_slots: what the GPU engine runs at once (labels show the limit it really runs).
    """
    error = error or {}
    tail = f" ({basis})" if basis else ""
    gpu = next(i for i, p in enumerate(predictions) if p.setting.policy == "gpu-only")
    g = predictions[gpu].measured
    best = _best(predictions, span, error)
    if gpu in best:
        return Choice(gpu, False, f"The CPU cannot help this traffic: no setting that uses it beats GPU-only "
                                  f"({g.goodput:.2f} requests/s within the targets, TTFT p99 "
                                  f"{duration(g.ttft_p99)}) by more than advise's own error, so GPU-only is "
                                  f"recommended{tail}.", tuple(i for i in best if i != gpu))
    pick = next((i for i in best if predictions[i].setting == current), None)
    if pick is None:
        pick = min(best, key=lambda i: predictions[i].setting.simplicity(current))
    chosen = predictions[pick].measured
    stay = "the current setting" if predictions[pick].setting == current else predictions[pick].setting.label(gpu_slots)
    if chosen.goodput > g.goodput + max(noise(g.goodput, span), abs(error.get("goodput", 0.0)) * g.goodput):
        edge = f"{chosen.goodput - g.goodput:+.2f} over GPU-only"
    else:
        edge = f"as GPU-only does, with TTFT p99 {duration(chosen.ttft_p99)} against its {duration(g.ttft_p99)}"
    return Choice(pick, True, f"The CPU helps: {stay} is predicted to serve {chosen.goodput:.2f} requests/s "
                              f"within the targets, {edge}{tail}.", tuple(i for i in best if i != pick))


def _option(p: Prediction, current: Setting, tied: bool, gpu_slots: int | None) -> AdviceOption:
    m = p.measured
    return AdviceOption(label=p.setting.label(gpu_slots), settings=p.setting.settings(), goodput=m.goodput,
                        throughput=m.throughput, ttft_p50=m.ttft_p50, ttft_p99=m.ttft_p99, tpot_p99=m.tpot_p99,
                        tpot_p50=m.tpot_p50, output_tps=m.output_tps, cpu_share=m.cpu_share,
                        current=p.setting == current, tied=tied)


def advice(predictions: Sequence[Prediction], current: Setting, actual: Measured, choice: Choice | None,
           profiles: dict[str, str], current_error: dict[str, float], *, refused: str | None = None,
           error_bound: float | None = None, forced: bool = False, gpu_slots: int | None = None) -> AdviceModel:
    """The advice on the wire (``POST /v1/advice``, ``--json``); no recommendation when refused."""
    tied = set(choice.tied) if choice is not None else set()
    recommend = choice is not None and (refused is None or forced)
    return AdviceModel(
        made_at=time.time(), requests=actual.requests, window_s=actual.span, profiles=profiles,
        options=[_option(p, current, i in tied, gpu_slots) for i, p in enumerate(predictions)],
        current_error=current_error, recommended=choice.index if recommend and choice is not None else None,
        summary=refused if refused is not None and not forced else (choice.summary if choice is not None else ""),
        refused=refused, error_bound=error_bound, forced=forced,
    )
