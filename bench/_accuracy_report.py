"""The accuracy benchmark's verdicts, summary table and plot; all from the JSON report (plain dicts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

Report = dict[str, Any]
Figure = dict[str, Any]

MET, MISSED, NOT_JUDGED, NOT_RUN = "met", "missed", "quick: not judged", "not run"


def _figure(stage: str, name: str, error: float | None, bound: float, verdict: str, detail: str = "") -> Figure:
    return {"stage": stage, "figure": name, "error": error, "bound": bound, "verdict": verdict, "detail": detail}


def _timing_verdict(error: float, bound: float, quick: bool) -> str:
    if quick:
        return NOT_JUDGED
    return MET if abs(error) <= bound else MISSED


def _seconds(value: float) -> str:
    """A step-model constant in the unit that shows it best."""
    return f"{value * 1e3:.3g} ms" if value >= 1e-3 else f"{value * 1e6:.3g} µs"


def _recovery(report: Report) -> list[Figure]:
    base = report["baseline"]
    out = []
    for name, found in base["profiles"].items():
        if "error" in found and isinstance(found["error"], str):
            out.append(_figure("recovery", f"{name}: calibration", None, base["bound"], MISSED, found["error"]))
            continue
        for term, t in found["terms"].items():
            verdict = (MET if t["ok"] else MISSED) if base.get("judged", True) else NOT_JUDGED
            out.append(_figure("recovery", f"{name}: {term}", t["error"], base["bound"], verdict,
                               f"fitted {_seconds(t['fitted'])}, profile {_seconds(t['profile'])}"))
    return out


def _stage(report: Report, key: str, stage: str, names: dict[str, str]) -> list[Figure]:
    block = report.get(key)
    quick = bool(report["quick"])
    if block is None:
        return [_figure(stage, label, None, 0.0, NOT_RUN, "the baseline refused") for label in names.values()]
    if "error" in block:
        return [_figure(stage, label, None, block["bound"], MISSED, block["error"]) for label in names.values()]
    return [_figure(stage, label, block["errors"][k], block["bound"],
                    _timing_verdict(block["errors"][k], block["bound"], quick), block.get("detail", ""))
            for k, label in names.items()]


def figures(report: Report) -> list[Figure]:
    """Every figure with its bound and verdict (none timed is judged in a quick run)."""
    llama = {"TTFT p50": "TTFT p50", "TPOT p50": "TPOT p50", "output tok/s": "output tok/s"}
    advise = {"ttft_p50": "current setting: TTFT p50", "throughput": "current setting: throughput"}
    return [*_recovery(report), *_stage(report, "llama", "llama-server", llama),
            *_stage(report, "advise", "advise", advise)]


def exit_code(report: Report) -> int:
    """0: every target met; 1: one missed; 2: the baseline refused."""
    if not report["baseline"]["ok"]:
        return 2
    return 1 if any(f["verdict"] == MISSED for f in report["figures"]) else 0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def table(report: Report) -> Table:
    """The summary: figure, measured error, bound, verdict."""
    title = "Simulator accuracy" + (" (quick: timings not judged)" if report["quick"] else "")
    out = Table(title=title, title_justify="left")
    for col in ("stage", "figure", "measured", "bound", "verdict", "detail"):
        out.add_column(col, justify="right" if col in ("measured", "bound") else "left")
    colour = {MET: "green", MISSED: "red"}
    for f in report["figures"]:
        verdict = f["verdict"]
        shown = f"[{colour[verdict]}]{verdict}[/]" if verdict in colour else f"[dim]{verdict}[/]"
        out.add_row(f["stage"], f["figure"], _pct(f["error"]), f"{f['bound']:.0%}" if f["bound"] else "-", shown,
                    f["detail"])
    return out


def plot(report: Report, path: Path) -> Path | None:
    """Each figure's error as a bar, its bound as a band; None without matplotlib or figures."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shown = [f for f in report["figures"] if f["error"] is not None]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(shown) + 1.5))
    ys = list(range(len(shown)))
    colours = {MET: "tab:green", MISSED: "tab:red"}
    ax.barh(ys, [100 * f["error"] for f in shown], color=[colours.get(f["verdict"], "tab:gray") for f in shown])
    for y, f in enumerate(shown):
        ax.plot([-100 * f["bound"], 100 * f["bound"]], [y, y], "|", color="black", markersize=12)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{f['stage']}: {f['figure']}" for f in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("fitted or simulated vs measured, % (bars: error; ticks: the bound)")
    ax.set_title("Simulator accuracy" + (" (quick run)" if report["quick"] else ""))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
