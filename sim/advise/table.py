"""The advice for people: a rich table of the options, the current setting's error, the verdict."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from sim.advise.window import Measured
from syshaxd.schema import AdviceModel

__all__ = ["error_table", "options_table"]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:,.0f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def options_table(advice: AdviceModel) -> Table:
    """One row per option: predicted goodput, throughput, TTFT p50/p99, TPOT p99, CPU share."""
    table = Table(title=f"{advice.requests} recorded requests over {advice.window_s:,.1f} s, replayed "
                        f"({', '.join(f'{d}: {p}' for d, p in sorted(advice.profiles.items()))})")
    table.add_column("", no_wrap=True)
    table.add_column("setting")
    for name in ("goodput req/s", "throughput req/s", "TTFT p50 s", "TTFT p99 s", "TPOT p99 ms", "CPU share"):
        table.add_column(name, justify="right")
    for i, o in enumerate(advice.options):
        marks = ("* " if o.current else "  ") + ("->" if i == advice.recommended else "  ")
        style = "bold green" if i == advice.recommended else ("bold" if o.current else "")
        table.add_row(marks, Text(o.label, style=style), f"{o.goodput:,.2f}", f"{o.throughput:,.2f}",
                      _s(o.ttft_p50), _s(o.ttft_p99), _ms(o.tpot_p99), f"{o.cpu_share:.0%}")
    table.caption = "* current setting   -> recommended"
    return table


def error_table(predicted: Measured | None, actual: Measured, errors: dict[str, float]) -> Table:
    """The current setting: predicted against what really happened on the same window."""
    table = Table(title="current setting: predicted vs actual on the recorded window")
    table.add_column("metric")
    table.add_column("predicted", justify="right")
    table.add_column("actual", justify="right")
    table.add_column("error", justify="right")
    rows = (
        ("TTFT p50 s", "ttft_p50", _s), ("TTFT p99 s", "ttft_p99", _s), ("TPOT p99 ms", "tpot_p99", _ms),
        ("throughput req/s", "throughput", lambda v: f"{v:,.2f}"),
        ("output tokens/s", "output_tps", lambda v: f"{v:,.1f}"),
        ("goodput req/s", "goodput", lambda v: f"{v:,.2f}"),
    )
    for title, key, fmt in rows:
        p = getattr(predicted, key) if predicted is not None else None
        a = getattr(actual, key)
        err = errors.get(key)
        table.add_row(title, "-" if p is None else fmt(p), "-" if a is None else fmt(a),
                      "-" if err is None else f"{err:+.0%}")
    return table
