"""The advice for people: a rich table of the options, one per class and option, the current
setting's self-check, the verdict.

Durations read in milliseconds below a second (:func:`syshaxd.schema.duration`), figures by the names
an operator reads (TTFT p99, output tokens/s).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from rich.text import Text

from sim.advise import check
from sim.advise.check import CHECKED
from sim.advise.window import Measured
from syshaxd.schema import AdviceClass, AdviceModel, duration

__all__ = ["classes_table", "error_table", "options_table"]


def options_table(advice: AdviceModel) -> Table:
    """One row per option: predicted goodput, throughput, TTFT p50/p99, TPOT p50/p99, output tokens/s, CPU share."""
    table = Table(title=f"{advice.requests} recorded requests over {advice.window_s:,.1f} s, replayed "
                        f"({', '.join(f'{d}: {p}' for d, p in sorted(advice.profiles.items()))})")
    table.add_column("", no_wrap=True)
    table.add_column("setting")
    for name in ("goodput req/s", "throughput req/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
                 "output tokens/s", "CPU share"):
        table.add_column(name, justify="right")
    for i, o in enumerate(advice.options):
        mark = "->" if i == advice.recommended else ("==" if o.tied else "  ")
        style = "bold green" if i == advice.recommended else ("bold" if o.current else "")
        table.add_row(("* " if o.current else "  ") + mark, Text(o.label, style=style), f"{o.goodput:,.2f}",
                      f"{o.throughput:,.2f}", duration(o.ttft_p50), duration(o.ttft_p99), duration(o.tpot_p50),
                      duration(o.tpot_p99), "-" if o.output_tps is None else f"{o.output_tps:,.1f}",
                      f"{o.cpu_share:.0%}")
    table.caption = "* current setting   -> recommended   == tied with it (apart by less than advise's own error)"
    return table


def _class_cells(c: AdviceClass, target: str) -> list[str]:
    return [str(c.requests), str(c.met), f"{c.goodput:,.3f}", f"{duration(c.ttft_p99)}{target}", str(c.refused),
            f"{c.gpu_share:.0%}", f"{c.cpu_share:.0%}", f"{c.split_share:.0%}"]


def classes_table(advice: AdviceModel) -> Table:
    """Per option and service class, each request judged at its own targets: requests, those
    meeting them, goodput, TTFT p99 against the class's target, refusals, and where the
    completed ones ran (GPU, CPU, split); what really happened first."""
    table = Table(title="per service class (each request judged at its own targets)")
    table.add_column("", no_wrap=True)
    table.add_column("setting")
    table.add_column("class")
    for name in ("requests", "met", "goodput req/s", "TTFT p99 (target)", "refused", "GPU", "CPU", "split"):
        table.add_column(name, justify="right")
    order = sorted(advice.classes, key=lambda n: (advice.classes[n].priority, n))
    targets = {n: f" ({duration(advice.classes[n].ttft)})" if advice.classes[n].ttft is not None else ""
               for n in order}
    happened = [n for n in order if n in advice.actual_classes]
    for name in happened:
        table.add_row("", Text("what happened", style="dim") if name == happened[0] else "", name,
                      *_class_cells(advice.actual_classes[name], targets[name]), end_section=name == happened[-1])
    for i, o in enumerate(advice.options):
        mark = "->" if i == advice.recommended else ("==" if o.tied else "  ")
        style = "bold green" if i == advice.recommended else ("bold" if o.current else "")
        for k, name in enumerate(n for n in order if n in o.classes):
            first = k == 0
            table.add_row((("* " if o.current else "  ") + mark) if first else "",
                          Text(o.label, style=style) if first else "", name,
                          *_class_cells(o.classes[name], targets[name]), end_section=k == len(o.classes) - 1)
    table.caption = "GPU / CPU / split: where the completed requests ran (split: GPU prefill, CPU decode)"
    return table


def _rate(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:,.{digits}f}"


def error_table(predicted: Measured | None, actual: Measured, errors: dict[str, float],
                bound: float | None = None) -> Table:
    """The self-check: the current setting replayed against what really happened on the same window.

    An error the bound judges and finds over it is red; one it does not judge (a p99 of too few
    requests, a latency within a few milliseconds) is dim.
    """
    title = "self-check: the current setting, predicted vs what happened"
    table = Table(title=title + (f" (bound {bound:.0%})" if bound is not None else ""))
    table.add_column("figure")
    table.add_column("predicted", justify="right")
    table.add_column("actual", justify="right")
    table.add_column("error", justify="right")
    formats: dict[str, Callable[[float], str]] = {
        "goodput": _rate(2), "output_tps": _rate(1), "throughput": _rate(2)}
    names = {**CHECKED, "goodput": "goodput req/s", "throughput": "throughput req/s"}
    judged = check.judged(predicted, actual) if predicted is not None else {}
    for key in (*CHECKED, "throughput"):
        fmt = formats.get(key, duration)
        p = getattr(predicted, key) if predicted is not None else None
        a = getattr(actual, key)
        err = errors.get(key)
        style = "dim" if key not in judged or judged[key] != err else ""
        if bound is not None and key in judged and abs(judged[key]) > bound:
            style = "bold red"
        table.add_row(names[key], "-" if p is None else fmt(p), "-" if a is None else fmt(a),
                      Text("-" if err is None else f"{err:+.0%}", style=style))
    return table
