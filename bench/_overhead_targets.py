"""The overhead benchmark's targets (issue #35, item 5), judged on the medians; and its plot.

Against vllm-router, measured in the same run: proxy CPU per request at most 1.5x the
router's, streamed and not (at 16 concurrent clients), for syshaxd with one API process and
with two; TTFT p50 added over the direct path within the router's + 0.5 ms at 1 and 16
streams; requests/s at least 0.95x the router's at 64 and 256 streams. And the idle daemon
under half a percent of a core.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROUTER = "vllm-router"
#: Idle daemon CPU must stay under this share of one core.
IDLE_TARGET = 0.5
CPU_RATIO = 1.5
TTFT_SLACK_MS = 0.5
RATE_RATIO = 0.95


def _added(per: dict[str, Any], name: str) -> float | None:
    ours, direct = per[name]["ttft_p50_ms"], per["direct"]["ttft_p50_ms"]
    return None if ours is None or direct is None else ours - direct


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "met" if ok else "missed"


def ours(per: dict[str, Any]) -> list[str]:
    """syshaxd's paths in a case (one API process, and with workers)."""
    return [name for name in per if name.startswith("syshax")]  # not "tree", another checkout's


def judge(rows: dict[str, dict[str, Any]], idle: dict[str, float]) -> list[dict[str, str]]:
    """Each target with the measured figures and met/missed (n/a where a case or the router is missing)."""
    out: list[dict[str, str]] = []
    for case in ("stream-16", "whole-16"):
        per = rows.get(case)
        if per is None or ROUTER not in per:
            continue
        for name in ours(per):
            mine, theirs = per[name]["cpu_ms_per_request"], per[ROUTER]["cpu_ms_per_request"]
            ok = None if not mine or not theirs else mine <= CPU_RATIO * theirs
            out.append({"target": f"{case}, {name}: CPU per request <= {CPU_RATIO:g}x router's",
                        "measured": f"{mine:.2f} vs {theirs:.2f} ms ({mine / theirs:.2f}x)" if ok is not None else "-",
                        "verdict": _verdict(ok)})
    for case in ("stream-1", "stream-16"):
        per = rows.get(case)
        if per is None or ROUTER not in per:
            continue
        for name in ours(per):
            mine_ms, theirs_ms = _added(per, name), _added(per, ROUTER)
            ok = None if mine_ms is None or theirs_ms is None else mine_ms <= theirs_ms + TTFT_SLACK_MS
            out.append({"target": f"{case}, {name}: TTFT p50 added <= router's + {TTFT_SLACK_MS:g} ms",
                        "measured": f"{mine_ms:+.2f} vs {theirs_ms:+.2f} ms" if ok is not None else "-",
                        "verdict": _verdict(ok)})
    for case in ("stream-64", "stream-256"):
        per = rows.get(case)
        if per is None or ROUTER not in per:
            continue
        for name in ours(per):
            rate, theirs_rate = per[name]["requests_per_s"], per[ROUTER]["requests_per_s"]
            ok = None if not theirs_rate else rate >= RATE_RATIO * theirs_rate
            out.append({"target": f"{case}, {name}: requests/s >= {RATE_RATIO:g}x router's",
                        "measured": f"{rate:.0f} vs {theirs_rate:.0f} ({rate / theirs_rate:.2f}x)"
                        if theirs_rate else "-", "verdict": _verdict(ok)})
    out.append({"target": f"idle: daemon CPU < {IDLE_TARGET}% of a core",
                "measured": f"{idle['core_percent']:.2f}% ({idle['cpu_ms_per_s']} ms/s)",
                "verdict": _verdict(idle["core_percent"] < IDLE_TARGET)})
    return out


def plot(report: dict[str, Any], path: Path) -> Path | None:
    """Added TTFT and CPU per request against concurrency, per proxy (streamed cases)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    streamed = sorted((int(k.split("-")[1]), v) for k, v in report["cases"].items() if k.startswith("stream-"))
    if not streamed:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in (n for n in streamed[0][1] if n != "direct"):
        xs = [c for c, _ in streamed]
        left.plot(xs, [_added(per, name) for _, per in streamed], marker="o", label=name)
        right.plot(xs, [per[name]["cpu_ms_per_request"] for _, per in streamed], marker="o", label=name)
    for ax, title in ((left, "TTFT p50 added over direct (ms)"), (right, "proxy CPU per request (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
