"""The simulator's side of the calibration table in docs/simulator.md.

Prints (1) the gpu-a100 profile against the published vLLM measurements (points 1-5 of
shared/calibration/README.md: TPOT and output tokens/s at 1, 10, 15/20, 30/50/100 and one
card at 10/50/100 prompts), and (2) every profile's decode tokens/s at batch 1, 8, 32, 64
and TTFT at 512 and 2048 prompt tokens. Writes JSON to bench/results/sim_calibration.json.
Exits 1 when a published point is outside 20%. ``--quick`` skips the largest bursts.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import results_dir  # noqa: E402
from sim.calibration import (  # noqa: E402
    BATCHES,
    PROMPTS,
    REFERENCE,
    TOLERANCE,
    PointCheck,
    ProfileRow,
    check_points,
    profile_row,
)
from sim.profile import profile_names  # noqa: E402


def points_table(checks: list[PointCheck]) -> Table:
    table = Table(title="gpu-a100 vs published vLLM measurements (1024 in / 1024 out, all prompts at once)")
    for col in ("pt", "setup", "prompts", "TPOT pub", "TPOT sim", "diff", "tok/s pub", "tok/s sim", "diff",
                "TTFT pub", "TTFT sim", "ok"):
        table.add_column(col, justify="right")
    for c in checks:
        p, m = c.published, c.measured
        table.add_row(
            str(p.point), "2 x A100 TP2" if p.setup == "tp2" else "1 x A100", str(p.prompts),
            f"{p.tpot_ms:.1f} ms", f"{m.tpot_ms:.1f} ms", f"{c.tpot_error:+.0%}",
            f"{p.output_tps:.0f}", f"{m.output_tps:.0f}", f"{c.tps_error:+.0%}",
            f"{p.ttft_s:.2f} s" if p.ttft_s is not None else "-", f"{m.ttft_s:.2f} s",
            "yes" if c.within else "[red]NO[/]",
        )
    return table


def profiles_table(rows: list[ProfileRow]) -> Table:
    table = Table(title="decode tokens/s by batch (1024 context each) and TTFT by prompt (idle engine)")
    table.add_column("profile")
    for b in BATCHES:
        table.add_column(f"b={b}", justify="right")
    for n in PROMPTS:
        table.add_column(f"TTFT {n}", justify="right")
    table.add_column("KV tokens", justify="right")
    for r in rows:
        ref = REFERENCE.get(r.profile, {})
        cells = [f"{r.decode_tps[b]:,.1f}" + (f"\n[dim]pub {ref[f'b{b}']}[/]" if ref.get(f"b{b}", "-") != "-" else "")
                 for b in BATCHES]
        cells += [f"{r.ttft_s[n]:.3g} s" + (f"\n[dim]pub {ref[f'ttft{n}']}[/]" if ref.get(f"ttft{n}", "-") != "-" else "")
                  for n in PROMPTS]
        table.add_row(r.profile, *cells, f"{r.kv_tokens:,}")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the largest bursts (as make test does)")
    parser.add_argument("--out", type=Path, help="JSON output (default bench/results/sim_calibration.json)")
    args = parser.parse_args()
    console = Console()
    checks = check_points(quick=args.quick)
    rows = [profile_row(name) for name in profile_names()]
    console.print(points_table(checks))
    console.print(profiles_table(rows))
    bad = [c for c in checks if not c.within]
    console.print(f"{len(checks) - len(bad)} of {len(checks)} published points within {TOLERANCE:.0%}"
                  + ("" if not bad else f"; outside: {', '.join(f'pt {c.published.point} ({c.published.prompts})' for c in bad)}"))
    out = args.out or results_dir() / "sim_calibration.json"
    out.write_text(json.dumps({
        "tolerance": TOLERANCE,
        "points": [{"published": asdict(c.published), "simulated": asdict(c.measured), "tpot_error": c.tpot_error,
                    "tps_error": c.tps_error, "within": c.within} for c in checks],
        "profiles": [{"profile": r.profile, "decode_tps": r.decode_tps, "ttft_s": r.ttft_s, "kv_tokens": r.kv_tokens,
                      "published": REFERENCE.get(r.profile, {})} for r in rows],
    }, indent=1), encoding="utf-8")
    console.print(f"wrote {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
