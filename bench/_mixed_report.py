"""Tables of the mixed-traffic benchmark: goodput per class and in total, per policy and rate.

A point past capacity that the run cannot show a class's overload at is not reported for
that class, nor in total: its cells say ``not shown`` (:func:`bench._mixed_plan.overload`).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench._mixed import CLASSES
from bench._mixed_plan import reported

Report = dict[str, Any]
SHORT = "not shown"


def _runs(report: Report, workload: str, scenario: str) -> list[dict[str, Any]]:
    block = report["workloads"][workload]["scenarios"][scenario]
    order = {p: i for i, p in enumerate(report["config"]["policies"])}
    return sorted(block["runs"], key=lambda r: (r["rate_factor"], order.get(r["policy"], 99)))


def _class_cell(block: dict[str, Any], run: dict[str, Any], klass: str) -> str:
    if not reported(block["overload"], run["rate_factor"], klass):
        return SHORT
    c = run["by_class"].get(klass)
    return "-" if c is None else f"{c['goodput']:.3g}"


def _refusals(run: dict[str, Any], klass: str) -> str:
    c = run["by_class"].get(klass) or {}
    return ", ".join(f"{n} {reason}" for reason, n in (c.get("refusals") or {}).items()) or "0"


def row(block: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """One run's cells: goodput per class and in total, share of the ceiling, refusals per class, CPU share."""
    total = reported(block["overload"], run["rate_factor"])
    cells = [_class_cell(block, run, k) for k in CLASSES]
    cells += [f"{run['goodput']:.3g}" if total else SHORT,
              f"{run['ceiling_fraction'] * 100:.0f}%" if total else "-"]
    cells += [_refusals(run, k) for k in CLASSES]
    cells.append(f"{run['cpu_request_share'] * 100:.0f}%")
    return cells


HEAD = [*(f"{k} goodput" for k in CLASSES), "total goodput", "% ceiling", *(f"{k} refused" for k in CLASSES), "CPU req"]


def rich_table(report: Report, workload: str, scenario: str) -> Table:
    """The detailed table of one mixed workload on one scenario."""
    block = report["workloads"][workload]["scenarios"][scenario]
    table = Table(title=f"{workload} on {scenario}: GPU-only capacity {block['capacity']:.3g} req/s, ceiling "
                  f"{block['ceiling']:.3g} req/s (" + ", ".join(f"{k} {v['ceiling']:.3g}" for k, v in block["by_class"].items())
                  + f"); the CPU adds {block['cpu_adds'] * 100:.1f}% of the GPU alone", title_justify="left")
    for col in ("rate", "policy", *HEAD):
        table.add_column(col, justify="left" if col == "policy" else "right")
    last = None
    for run in _runs(report, workload, scenario):
        if run["rate_factor"] != last and last is not None:
            table.add_section()
        rate = f"{run['offered_rate']:.3g} ({run['rate_factor']:g}x)" if run["rate_factor"] != last else ""
        last = run["rate_factor"]
        table.add_row(rate, run["policy"], *row(block, run))
    return table


def markdown_table(report: Report, workload: str, scenario: str) -> str:
    """The detailed table as Markdown."""
    block = report["workloads"][workload]["scenarios"][scenario]
    head = ["rate req/s", "policy", *HEAD]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in _runs(report, workload, scenario):
        cells = [f"{run['offered_rate']:.3g} ({run['rate_factor']:g}x)", run["policy"], *row(block, run)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_markdown(report: Report, workload: str) -> str:
    """Per scenario: capacity, ceilings per class, what the CPU adds, overload seen per class, the checks."""
    head = ["scenario", "GPU-only capacity", "GPU alone best", "CPU alone (interactive / batch)",
            "CPU alone adds", "adaptive best (vs GPU alone)", "overload seen (interactive / batch)", "interactive >= gpu-priority - 1%",
            "total >= 90% of ceiling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s, b in report["workloads"][workload]["scenarios"].items():
        cpu = " / ".join(f"{b['by_class'][k]['cpu_alone']:.2g}" for k in CLASSES)
        seen = " / ".join("yes" if b["overload"][k]["seen"] else "**no**" for k in CLASSES)
        marks = [f"{'yes' if c['met'] else '**no**'}: {c['measured']}" + (f" -- {c['cause']}" if c.get("cause") else "")
                 for c in b["checks"]]
        while len(marks) < 2:
            marks.insert(0, "-")
        lines.append("| " + " | ".join([
            s, f"{b['capacity']:.3g}", f"{b['gpu_alone_goodput']:.3g}", cpu, f"{b['cpu_adds'] * 100:.1f}%",
            f"{b['adaptive_best']:.3g} ({b['adaptive_gain'] * 100:+.0f}%)", seen, *marks]) + " |")
    return "\n".join(lines)


def checks_table(report: Report, workload: str) -> Table:
    """The targets per scenario as a rich table."""
    table = Table(title=f"Targets on {workload}", title_justify="left")
    for col in ("scenario", "target", "measured", "met", "detail"):
        table.add_column(col)
    for s, b in report["workloads"][workload]["scenarios"].items():
        for c in b["checks"]:
            detail = "; ".join(x for x in (c.get("detail", ""), c.get("cause", "")) if x)
            table.add_row(s, c["name"], c["measured"], "[green]yes[/]" if c["met"] else "[red]NO[/]", detail)
    return table
