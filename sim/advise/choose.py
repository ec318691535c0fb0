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

With more than one service class every request is judged at its own targets, the options tied
on goodput are narrowed by how many requests of each class meet their targets, the class
that runs first (lowest priority) first, and latency is that class's TTFT p99; ``gpu-priority``
counts as a setting without the CPU, as GPU-only does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.advise.check import LATENCY_FLOOR
from sim.advise.options import GPU_ALONE, Setting
from sim.advise.predict import Prediction
from sim.advise.window import Measured
from syshaxd.schema import AdviceClass, AdviceClassTargets, AdviceModel, AdviceOption, duration

__all__ = ["NOISE_REQUESTS", "NOISE_SHARE", "Choice", "Classes", "advice", "by_priority", "choose", "gpu_alone",
           "gpu_name", "margin", "noise"]

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


def margin(goodput: float, span: float, error: Mapping[str, float]) -> float:
    """How far below ``goodput`` another goodput still ties with it: noise, or advise's own error."""
    return max(noise(goodput, span), abs(error.get("goodput", 0.0)) * goodput)


def _meets_all(m: Measured) -> bool:
    """Every request finished and met both targets."""
    return m.completed == m.requests and math.isclose(m.goodput, m.throughput, rel_tol=1e-9)


def by_priority(classes: Mapping[str, AdviceClassTargets]) -> list[str]:
    """Class names, the one that runs first first."""
    return sorted(classes, key=lambda name: (classes[name].priority, name))


def _by_class(predictions: Sequence[Prediction], tied: list[int], order: Sequence[str]) -> list[int]:
    """The tied options narrowed class by class, first to run first, by requests meeting their targets."""
    for name in order:
        met = {i: predictions[i].classes[name].met if name in predictions[i].classes else 0 for i in tied}
        most = max(met.values())
        tied = [i for i in tied if met[i] >= most - max(NOISE_REQUESTS, NOISE_SHARE * most)]
    return tied


def _best(predictions: Sequence[Prediction], span: float, error: Mapping[str, float],
          order: Sequence[str] = ()) -> list[int]:
    """The options no other beats by more than the error: on goodput (then, with classes, on
    each class's requests meeting their targets), then on TTFT p99 (with classes, the first class's)."""
    best = max(p.measured.goodput for p in predictions)
    tied = [i for i, p in enumerate(predictions) if p.measured.goodput >= best - margin(best, span, error)]
    if len(order) > 1:
        tied = _by_class(predictions, tied, order)
    if not all(_meets_all(predictions[i].measured) for i in tied):
        return tied

    def ttft(p: Prediction) -> float | None:
        first = p.classes.get(order[0]) if len(order) > 1 else None
        return first.ttft_p99 if first is not None else p.measured.ttft_p99

    ttfts = {i: ttft(predictions[i]) for i in tied}
    fastest = min((t for t in ttfts.values() if t is not None), default=None)
    if fastest is None:
        return tied
    slack = max(NOISE_SHARE * fastest, abs(error.get("ttft_p99", 0.0)) * fastest, LATENCY_FLOOR)
    return [i for i in tied if ttfts[i] is not None and ttfts[i] <= fastest + slack]  # type: ignore[operator]


def gpu_alone(predictions: Sequence[Prediction], current: Setting) -> int:
    """The best option without the CPU (gpu-only, gpu-priority): most goodput, then the simplest."""
    alone = [i for i, p in enumerate(predictions) if p.setting.policy in GPU_ALONE]
    top = max(predictions[i].measured.goodput for i in alone)
    return min((i for i in alone if predictions[i].measured.goodput == top),
               key=lambda i: predictions[i].setting.simplicity(current))


def gpu_name(setting: Setting) -> str:
    """A setting without the CPU, for the sentence."""
    return "GPU-only" if setting.policy == "gpu-only" else f"{setting.policy} (strict priority on the GPU alone)"


def choose(predictions: Sequence[Prediction], current: Setting, span: float,
           error: Mapping[str, float] | None = None, basis: str = "", gpu_slots: int | None = None,
           classes: Mapping[str, AdviceClassTargets] | None = None) -> Choice:
    """The recommendation among ``predictions`` (one of them must be gpu-only).

    Args:
        error: the self-check's relative errors on the current setting (ties are options
            apart by less).
        basis: appended to the sentence in parentheses: what the advice stands on.
        gpu_slots: what the GPU engine runs at once (labels show the limit it really runs).
        classes: the window's service classes (more than one: ties are broken class by class).
    """
    error = error or {}
    tail = f" ({basis})" if basis else ""
    best = _best(predictions, span, error, by_priority(classes or {}))
    alone = [i for i in best if predictions[i].setting.policy in GPU_ALONE]
    gpu = min(alone, key=lambda i: predictions[i].setting.simplicity(current)) if alone else \
        gpu_alone(predictions, current)
    g = predictions[gpu].measured
    if alone:
        name = gpu_name(predictions[gpu].setting)
        return Choice(gpu, False, f"The CPU cannot help this traffic: no setting that uses it beats {name} "
                                  f"({g.goodput:.2f} requests/s within the targets, TTFT p99 "
                                  f"{duration(g.ttft_p99)}) by more than advise's own error, so "
                                  f"{name.split(' (')[0]} is recommended{tail}.", tuple(i for i in best if i != gpu))
    pick = next((i for i in best if predictions[i].setting == current), None)
    if pick is None:
        pick = min(best, key=lambda i: predictions[i].setting.simplicity(current))
    chosen = predictions[pick].measured
    stay = "the current setting" if predictions[pick].setting == current else predictions[pick].setting.label(gpu_slots)
    name = gpu_name(predictions[gpu].setting).split(" (")[0]
    if chosen.goodput > g.goodput + max(noise(g.goodput, span), abs(error.get("goodput", 0.0)) * g.goodput):
        edge = f"{chosen.goodput - g.goodput:+.2f} over {name}"
    else:
        edge = f"as {name} does, with TTFT p99 {duration(chosen.ttft_p99)} against its {duration(g.ttft_p99)}"
    return Choice(pick, True, f"The CPU helps: {stay} is predicted to serve {chosen.goodput:.2f} requests/s "
                              f"within the targets, {edge}{tail}.", tuple(i for i in best if i != pick))


def _option(p: Prediction, current: Setting, tied: bool, gpu_slots: int | None,
            table: Mapping[str, Mapping[str, Any]]) -> AdviceOption:
    m = p.measured
    return AdviceOption(label=p.setting.label(gpu_slots), settings=p.setting.settings(table), goodput=m.goodput,
                        throughput=m.throughput, ttft_p50=m.ttft_p50, ttft_p99=m.ttft_p99, tpot_p99=m.tpot_p99,
                        tpot_p50=m.tpot_p50, output_tps=m.output_tps, cpu_share=m.cpu_share,
                        current=p.setting == current, tied=tied, classes=p.classes)


@dataclass(frozen=True)
class Classes:
    """What the advice says of the window's service classes."""

    table: Mapping[str, Mapping[str, Any]]  # service.classes as the daemon shows it
    targets: Mapping[str, AdviceClassTargets]  # the window's classes
    actual: Mapping[str, AdviceClass]  # what happened to each
    cpu_classes: list[str] | None = None  # the classes the CPU should serve (None: not judged)
    verdict: str = ""  # in one sentence


def advice(predictions: Sequence[Prediction], current: Setting, actual: Measured, choice: Choice | None,
           profiles: dict[str, str], current_error: dict[str, float], *, refused: str | None = None,
           error_bound: float | None = None, forced: bool = False, gpu_slots: int | None = None,
           classes: Classes | None = None) -> AdviceModel:
    """The advice on the wire (``POST /v1/advice``, ``--json``); no recommendation when refused."""
    tied = set(choice.tied) if choice is not None else set()
    recommend = choice is not None and (refused is None or forced)
    table = classes.table if classes is not None else {}
    return AdviceModel(
        made_at=time.time(), requests=actual.requests, window_s=actual.span, profiles=profiles,
        options=[_option(p, current, i in tied, gpu_slots, table) for i, p in enumerate(predictions)],
        current_error=current_error, recommended=choice.index if recommend and choice is not None else None,
        summary=refused if refused is not None and not forced else (choice.summary if choice is not None else ""),
        refused=refused, error_bound=error_bound, forced=forced,
        classes=dict(classes.targets) if classes is not None else {},
        actual_classes=dict(classes.actual) if classes is not None else {},
        cpu_classes=classes.cpu_classes if classes is not None and recommend else None,
        cpu_verdict=classes.verdict if classes is not None and recommend else "",
    )
