"""From predictions to advice: the current setting's error, the recommendation, one sentence.

The recommendation is the option of highest predicted goodput; options within noise of the
best are tied, and a tie goes to the current setting, then to the simplest (gpu-only before
classic before adaptive, auto-PD off before on, fewer changed keys). When no option that
uses the CPU beats gpu-only by more than noise, the CPU cannot help this traffic: advise
says so and recommends gpu-only.

Noise is the larger of :data:`NOISE_SHARE` of the compared goodput and
:data:`NOISE_REQUESTS` requests over the window: a replay of a few hundred requests moves
by about that much when one request's fate flips.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from sim.advise.options import Setting
from sim.advise.predict import Prediction
from sim.advise.window import Measured
from syshaxd.schema import AdviceModel, AdviceOption

__all__ = ["NOISE_REQUESTS", "NOISE_SHARE", "Choice", "advice", "choose", "errors"]

NOISE_SHARE = 0.05
NOISE_REQUESTS = 2


@dataclass(frozen=True)
class Choice:
    """The recommended option (an index into the predictions) and why, in one sentence."""

    index: int
    cpu_helps: bool
    summary: str


def noise(goodput: float, span: float) -> float:
    """How much two predicted goodputs may differ and still count as equal (requests/s)."""
    return max(NOISE_SHARE * goodput, NOISE_REQUESTS / span if span > 0 else 0.0)


def _relative(predicted: float | None, actual: float | None) -> float | None:
    if predicted is None or actual is None or actual == 0:
        return None
    return (predicted - actual) / actual


def errors(predicted: Measured, actual: Measured) -> dict[str, float]:
    """Relative error of each prediction against what happened: (predicted - actual) / actual."""
    pairs = {
        "ttft_p50": (predicted.ttft_p50, actual.ttft_p50),
        "ttft_p99": (predicted.ttft_p99, actual.ttft_p99),
        "tpot_p99": (predicted.tpot_p99, actual.tpot_p99),
        "throughput": (predicted.throughput, actual.throughput),
        "output_tps": (predicted.output_tps, actual.output_tps),
        "goodput": (predicted.goodput, actual.goodput),
    }
    out = {}
    for key, (p, a) in pairs.items():
        value = _relative(p, a)
        if value is not None:
            out[key] = value
    return out


def choose(predictions: Sequence[Prediction], current: Setting, span: float) -> Choice:
    """The recommendation among ``predictions`` (one of them must be gpu-only)."""
    gpu = next(i for i, p in enumerate(predictions) if p.setting.policy == "gpu-only")
    gpu_goodput = predictions[gpu].measured.goodput
    with_cpu = [p for p in predictions if p.setting.uses_cpu]
    best_cpu = max((p.measured.goodput for p in with_cpu), default=0.0)
    if best_cpu <= gpu_goodput + noise(gpu_goodput, span):
        return Choice(gpu, False, f"The CPU cannot help this traffic: no setting that uses it beats GPU-only "
                                  f"({gpu_goodput:.2f} requests/s within the targets) by more than noise, "
                                  f"so GPU-only is recommended.")
    # The CPU helps: the choice is among the settings that use it (GPU-only is beaten).
    tied = [i for i, p in enumerate(predictions)
            if p.setting.uses_cpu and p.measured.goodput >= best_cpu - noise(best_cpu, span)]
    pick = next((i for i in tied if predictions[i].setting == current), None)
    if pick is None:
        pick = min(tied, key=lambda i: predictions[i].setting.simplicity(current))
    chosen = predictions[pick]
    gain = chosen.measured.goodput - gpu_goodput
    stay = "the current setting" if chosen.setting == current else chosen.setting.label()
    return Choice(pick, True, f"The CPU helps: {stay} is predicted to serve {chosen.measured.goodput:.2f} "
                              f"requests/s within the targets, {gain:+.2f} over GPU-only.")


def _option(p: Prediction, current: Setting) -> AdviceOption:
    m = p.measured
    return AdviceOption(label=p.setting.label(), settings=p.setting.settings(), goodput=m.goodput,
                        throughput=m.throughput, ttft_p50=m.ttft_p50, ttft_p99=m.ttft_p99, tpot_p99=m.tpot_p99,
                        cpu_share=m.cpu_share, current=p.setting == current)


def advice(predictions: Sequence[Prediction], current: Setting, actual: Measured, choice: Choice,
           profiles: dict[str, str]) -> AdviceModel:
    """The advice on the wire (``POST /v1/advice``, ``--json``)."""
    mine = next((p for p in predictions if p.setting == current), None)
    return AdviceModel(
        made_at=time.time(), requests=actual.requests, window_s=actual.span, profiles=profiles,
        options=[_option(p, current) for p in predictions],
        current_error=errors(mine.measured, actual) if mine is not None else {},
        recommended=choice.index, summary=choice.summary,
    )
