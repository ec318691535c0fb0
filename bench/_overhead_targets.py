"""The overhead benchmark's targets (issue #21), judged on the medians; and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROUTER = "vllm-router"
#: Idle daemon CPU must stay under this share of one core.
IDLE_TARGET = 0.5


def _added(per: dict[str, Any], name: str) -> float | None:
    ours, direct = per[name]["ttft_p50_ms"], per["direct"]["ttft_p50_ms"]
    return None if ours is None or direct is None else ours - direct


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "met" if ok else "missed"


def judge(rows: dict[str, dict[str, Any]], idle: dict[str, float]) -> list[dict[str, str]]:
    """Each target with the measured figures and met/missed (n/a where a case or the router is missing)."""
    out: list[dict[str, str]] = []
    for case, slack in (("stream-1", 1.0), ("stream-16", 1.0), ("whole-1", 1.0), ("whole-16", 1.0),
                        ("stream-64", 5.0)):
        per = rows.get(case)
        if per is None or ROUTER not in per:
            continue
        ours, theirs = _added(per, "syshax"), _added(per, ROUTER)
        ok = None if ours is None or theirs is None else ours <= theirs + slack
        out.append({"target": f"{case}: TTFT p50 added <= router's + {slack:g} ms",
                    "measured": f"{ours:+.2f} vs {theirs:+.2f} ms" if ok is not None else "-",
                    "verdict": _verdict(ok)})
    for case in ("stream-16", "stream-64"):
        per = rows.get(case)
        if per is None or ROUTER not in per:
            continue
        ours, theirs = per["syshax"]["cpu_ms_per_request"], per[ROUTER]["cpu_ms_per_request"]
        ok = None if not ours or not theirs else ours <= 2 * theirs
        out.append({"target": f"{case}: proxy CPU per request <= 2x router's",
                    "measured": f"{ours:.2f} vs {theirs:.2f} ms ({ours / theirs:.2f}x)" if ok is not None else "-",
                    "verdict": _verdict(ok)})
    for case in ("stream-64", "stream-256"):
        per = rows.get(case)
        if per is None or ROUTER not in per:
            continue
        ours, theirs = per["syshax"]["requests_per_s"], per[ROUTER]["requests_per_s"]
        ok = None if not theirs else ours >= 0.9 * theirs
        out.append({"target": f"{case}: requests/s >= 0.9x router's",
                    "measured": f"{ours:.0f} vs {theirs:.0f} ({ours / theirs:.2f}x)" if theirs else "-",
                    "verdict": _verdict(ok)})
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
