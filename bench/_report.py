"""Reading the scheduling benchmark's results: rich tables, Markdown tables, target checks.

Everything here works on the JSON report (plain dicts), so the docs can be regenerated
from a saved ``bench/results/policies.json`` as well as from a fresh run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.table import Table

Report = dict[str, Any]
Run = dict[str, Any]

#: (column title, run key, format) of the detailed table.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("done req/s", "completed_rps", "{:.2f}"),
    ("out tok/s", "output_tps", "{:.0f}"),
    ("TTFT p50", "ttft_p50", "{:.2f}"),
    ("TTFT p99", "ttft_p99", "{:.1f}"),
    ("TTFT p99 finished", "ttft_p99_finished", "{:.1f}"),
    ("never finished", "unfinished", "{:d}"),
    ("TPOT p50 ms", "tpot_p50", "ms"),
    ("TPOT p99 ms", "tpot_p99", "ms"),
    ("e2e p99", "e2e_p99", "{:.0f}"),
    ("goodput", "goodput", "{:.2f}"),
    ("% ceiling", "ceiling_fraction", "%"),
    ("CPU req", "cpu_request_share", "%"),
    ("CPU tok", "cpu_token_share", "%"),
    ("GPU util", "gpu_util", "%"),
    ("CPU util", "cpu_util", "%"),
)


def fmt(value: object, spec: str) -> str:
    """A metric as the tables print it (``inf`` for a percentile some request never reached)."""
    if value is None:
        return "inf"
    if not isinstance(value, (int, float)):
        return str(value)
    if spec == "%":
        return f"{value * 100:.0f}%" if value >= 0.01 or value == 0 else f"{value * 100:.1f}%"
    if spec == "ms":
        return f"{value * 1000:.0f}"
    return spec.format(value)


def cell(run: Run, key: str, spec: str) -> str:
    """One cell of the detailed table (``-`` for a metric a report saved before it existed lacks)."""
    if key == "unfinished":
        return fmt(int(run["requests"]) - int(run["completed"]), spec)
    return fmt(run[key], spec) if key in run else "-"


def runs_of(report: Report, workload: str, scenario: str) -> list[Run]:
    """The sweep runs of one workload on one scenario, by rate then policy order."""
    block = report["workloads"][workload]["scenarios"][scenario]
    order = {p: i for i, p in enumerate(report["config"]["policies"])}
    return sorted(block["runs"], key=lambda r: (r["rate_factor"], order.get(r["policy"], 99)))


def rich_table(report: Report, workload: str, scenario: str) -> Table:
    """The detailed table of one workload on one scenario."""
    block = report["workloads"][workload]["scenarios"][scenario]
    title = (
        f"{workload} on {scenario}: GPU-only capacity {block['capacity']:.2f} req/s, "
        f"ceiling {block['ceiling']:.2f} req/s goodput"
    )
    table = Table(title=title, title_justify="left")
    for col in ("rate", "policy", *(c[0] for c in COLUMNS)):
        table.add_column(col, justify="left" if col == "policy" else "right")
    last = None
    for run in runs_of(report, workload, scenario):
        rate = f"{run['offered_rate']:.2f} ({run['rate_factor']:g}x)" if run["rate_factor"] != last else ""
        if run["rate_factor"] != last and last is not None:
            table.add_section()
        last = run["rate_factor"]
        table.add_row(rate, run["policy"], *(cell(run, key, spec) for _, key, spec in COLUMNS))
    return table


def markdown_table(report: Report, workload: str, scenario: str) -> str:
    """The detailed table as Markdown."""
    head = ["rate req/s", "policy", *(c[0] for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in runs_of(report, workload, scenario):
        cells = [f"{run['offered_rate']:.2f} ({run['rate_factor']:g}x)", run["policy"]]
        cells += [cell(run, key, spec) for _, key, spec in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _grid_cell(run: Run) -> str:
    """``0.52 [0.50-0.55] (95%)``: the median window's goodput, the spread over windows, its share of the ceiling."""
    windows = run.get("goodput_windows") or []
    spread = f" [{min(windows):.3g}-{max(windows):.3g}]" if len(windows) > 1 else ""
    return f"{run['goodput']:.3g}{spread} ({fmt(run['ceiling_fraction'], '%')})"


def goodput_grid(report: Report, workload: str) -> str:
    """Markdown: goodput (median window, spread over windows) and its share of the ceiling, per scenario, policy, rate."""
    factors = report["config"]["sweep"]
    head = ["scenario", "capacity", "ceiling", "policy", *(f"{f:g}x" for f in factors)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scenario, block in report["workloads"][workload]["scenarios"].items():
        by = {(r["policy"], r["rate_factor"]): r for r in block["runs"]}
        for i, policy in enumerate(report["config"]["policies"]):
            cap = f"{block['capacity']:.3g}" if block.get("capacity_met", True) else f"none ({block['capacity']:.3g})"
            cells = [scenario, cap, f"{block['ceiling']:.3g}"] if i == 0 else ["", "", ""]
            cells.append(policy)
            for f in factors:
                run = by.get((policy, f))
                cells.append(_grid_cell(run) if run else "-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Check:
    """One target of the issue, measured."""

    name: str
    target: str
    measured: str
    met: bool
    detail: str = ""


def _by(runs: Iterable[Run]) -> dict[tuple[str, float], Run]:
    return {(r["policy"], r["rate_factor"]): r for r in runs}


def check_targets(report: Report, workload: str, scenario: str) -> list[Check]:
    """The issue's four targets on one workload and scenario (the Azure trace is the one asked)."""
    block = report["workloads"][workload]["scenarios"][scenario]
    runs = block["runs"]
    factors = sorted({r["rate_factor"] for r in runs})
    by = _by(runs)
    checks: list[Check] = []

    def worst(other: str) -> Check:
        gaps = [(by[("adaptive", f)]["goodput"] - by[(other, f)]["goodput"], f) for f in factors
                if ("adaptive", f) in by and (other, f) in by]
        gap, at = min(gaps) if gaps else (0.0, 0.0)
        # Goodput is a count of requests over a fixed window: a difference below one request
        # of the run is noise of the trace window, not a policy effect.
        tolerance = 1e-9
        return Check(
            f"adaptive goodput >= {other} at every rate",
            "min(adaptive - " + other + ") >= 0",
            f"min {gap:+.3f} req/s at {at:g}x",
            gap >= -tolerance,
        )

    checks.append(worst("classic"))
    checks.append(worst("gpu-only"))

    ok_rates = [f for f in factors if ("gpu-only", f) in by and by[("gpu-only", f)]["attainment"] >= 0.9]
    if ok_rates:
        f = max(ok_rates)
        frac = by[("adaptive", f)]["ceiling_fraction"]
        checks.append(Check(
            "adaptive >= 90% of the ceiling where gpu-only still meets targets for 90%",
            ">= 90%", f"{frac * 100:.1f}% at {f:g}x ({by[('adaptive', f)]['goodput']:.2f} of {block['ceiling']:.2f} req/s)",
            frac >= 0.9,
        ))
    else:
        checks.append(Check("adaptive >= 90% of the ceiling where gpu-only meets targets for 90%", ">= 90%",
                            "no rate of the sweep where gpu-only meets the targets for 90%", False))

    checks.append(tail_check(by[("adaptive", max(factors))], by[("classic", max(factors))]))
    return checks


#: sysHAX's claim: P99 latency about 28% lower under high concurrency.
TAIL_CUT = 0.28


def tail_check(adaptive: Run, classic: Run) -> Check:
    """adaptive's P99 TTFT over the requests it finished, >= ``TAIL_CUT`` below classic's, leaving no more unfinished.

    A P99 over every request is infinite once more than 1% never finish, and a P99 over
    the finished ones alone rewards refusing the slowest: so the finished ones' P99 is
    compared, and the policy that cuts it must not leave more requests unfinished.
    """
    a, c = adaptive.get("ttft_p99_finished"), classic.get("ttft_p99_finished")
    lost_a, lost_c = (int(r["requests"]) - int(r["completed"]) for r in (adaptive, classic))
    lost = f"never finished: adaptive {lost_a}, classic {lost_c} of {adaptive['requests']}"
    name = f"adaptive P99 TTFT over finished requests at the top of the sweep >= {TAIL_CUT:.0%} below classic's"
    wanted = f">= {TAIL_CUT:.0%} lower, no more unfinished"
    if "ttft_p99_finished" not in adaptive or "ttft_p99_finished" not in classic:
        return Check(name, wanted, "not in this report (saved before it was measured): run it again", False)
    if a is None:
        return Check(name, wanted, f"adaptive finished no request ({lost})", False)
    if c is None:
        return Check(name, wanted, f"{a:.1f} s; classic finished no request ({lost})", True)
    cut = 1.0 - a / c if c > 0 else 0.0
    return Check(name, wanted, f"{a:.1f} s vs {c:.1f} s: {_pct_lower(cut)} ({lost})",
                 cut >= TAIL_CUT and lost_a <= lost_c)


def _pct_lower(cut: float) -> str:
    return f"{cut * 100:.0f}% lower" if cut >= 0 else f"{-cut * 100:.0f}% higher"


def checks_table(checks: list[Check], title: str) -> Table:
    """The target checks as a rich table."""
    table = Table(title=title, title_justify="left")
    for col in ("target", "wanted", "measured", "met"):
        table.add_column(col)
    for c in checks:
        table.add_row(c.name, c.target, c.measured, "[green]yes[/]" if c.met else "[red]NO[/]")
    return table


def checks_markdown(checks: list[Check]) -> str:
    """The target checks as Markdown."""
    lines = ["| target | wanted | measured | met |", "|---|---|---|---|"]
    lines += [f"| {c.name} | {c.target} | {c.measured} | {'yes' if c.met else '**no**'} |" for c in checks]
    return "\n".join(lines)
