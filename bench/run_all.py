"""Run every benchmark under bench/ (what `make bench` does); `--quick` runs each at a tiny size.

Each benchmark is a script that prints a table, writes JSON to bench/results/ and accepts
`--quick`. A benchmark that fails is reported and the others still run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
#: Order matters only for reading the output: cheap ones first.
ORDER = ["kick", "sim_calibration", "policies", "overhead", "console", "accuracy", "soak"]


def scripts() -> list[Path]:
    """Benchmark scripts present, in ORDER, then any others."""
    found = {p.stem: p for p in HERE.glob("*.py") if not p.stem.startswith("_") and p.stem != "run_all"}
    ordered = [found.pop(name) for name in ORDER if name in found]
    return ordered + sorted(found.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny run of each (as make test does)")
    parser.add_argument("only", nargs="*", help="benchmark names to run (default: all)")
    args = parser.parse_args()
    console = Console()
    summary = Table(title="Benchmarks")
    for col in ("benchmark", "result", "seconds"):
        summary.add_column(col)
    failed = 0
    for script in scripts():
        if args.only and script.stem not in args.only:
            continue
        console.rule(script.stem)
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, str(script), *(["--quick"] if args.quick else [])])
        ok = done.returncode == 0
        failed += not ok
        summary.add_row(script.stem, "ok" if ok else f"[red]failed ({done.returncode})[/]", f"{time.monotonic() - t0:.0f}")
    console.print(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
