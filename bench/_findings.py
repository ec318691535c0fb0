"""Sentences for docs/benchmarks.md, computed from a policies report (so they stay true)."""

from __future__ import annotations

from typing import Any

Run = dict[str, Any]


def _pct(x: float) -> str:
    return f"{x * 100:+.0f}%" if abs(x) >= 0.005 else "±0%"


def _at(runs: list[Run], policy: str, factor: float) -> Run | None:
    return next((r for r in runs if r["policy"] == policy and r["rate_factor"] == factor), None)


def _gain(a: float, b: float) -> float:
    return (a - b) / b if b > 0 else 0.0


def _scenario_line(name: str, block: dict[str, Any], factors: list[float]) -> str:
    runs = block["runs"]
    cap, top = block["capacity"], max(factors)
    parts = [
        f"**{name}**: GPU-only capacity {cap:.2f} req/s; the CPU alone reaches {block['cpu_alone_goodput']:.2g} req/s "
        f"of goodput at best, so the ceiling is {block['ceiling']:.2f} req/s "
        f"({_pct(_gain(block['ceiling'], block['gpu_alone_goodput']))} over the GPU alone)."
    ]
    g1, gt = _at(runs, "gpu-only", 1.0), _at(runs, "gpu-only", top)
    for policy in ("adaptive", "classic", "round-robin"):
        r1, rt = _at(runs, policy, 1.0), _at(runs, policy, top)
        if r1 is None or rt is None or g1 is None or gt is None:
            continue
        best = max((r for r in runs if r["policy"] == policy), key=lambda r: _gain(r["output_tps"], _tps(runs, r)))
        parts.append(
            f"{policy}: goodput {_pct(_gain(r1['goodput'], g1['goodput']))} vs gpu-only at 1x and "
            f"{_pct(_gain(rt['goodput'], gt['goodput']))} at {top:g}x (CPU: {rt['cpu_request_share'] * 100:.1f}% of "
            f"requests, {rt['cpu_token_share'] * 100:.1f}% of tokens, {rt['cpu_util'] * 100:.0f}% busy); best output-token "
            f"throughput gain {_pct(_gain(best['output_tps'], _tps(runs, best)))} (at {best['rate_factor']:g}x)."
        )
    over = min((f for f in factors if f > 1.0), default=None)
    if over is not None:
        pre = [f"{p} {r['gpu_preemptions']}" for p in ("gpu-only", "classic", "adaptive")
               if (r := _at(runs, p, over)) is not None]
        lost = [f"{p} {r['requests'] - r['completed']}" for p in ("gpu-only", "round-robin", "classic", "adaptive")
                if (r := _at(runs, p, over)) is not None]
        parts.append(f"At {over:g}x, GPU preemptions: {', '.join(pre)}; requests that never finished "
                     f"(of {runs[0]['requests']}): {', '.join(lost)}.")
    return " ".join(parts)


def _tps(runs: list[Run], like: Run) -> float:
    g = _at(runs, "gpu-only", like["rate_factor"])
    return float(g["output_tps"] if g else like["output_tps"])


def findings(report: dict[str, Any]) -> list[str]:
    """One bullet per workload and scenario, numbers from the report."""
    factors = report["config"]["sweep"]
    lines: list[str] = []
    for w, wblock in report["workloads"].items():
        lines.append(f"- *{w}*")
        for name, block in wblock["scenarios"].items():
            lines.append(f"  - {_scenario_line(name, block, factors)}")
    return lines
