"""Scheduling benchmark: what the CPU adds, policy by policy, on real traces, in virtual time.

Replays the Azure 2023 conversation trace, the ShareGPT length distribution (Poisson
arrivals) and a reasoning-style variant (outputs x10) through the simulator's model core
and the real policy functions, for gpu-only, round-robin, classic and adaptive, on four
hardware scenarios, at offered rates from half to twice the GPU-only capacity. Prints a
table per workload and scenario plus the issue's targets, writes JSON, and (full run) the
plots and the generated part of docs/benchmarks.md.

    .venv/bin/python bench/policies.py                 # everything (what `make bench` runs)
    .venv/bin/python bench/policies.py --quick         # a tiny run (seconds)
    .venv/bin/python bench/policies.py --workloads azure-conv --scenarios a100-80g+q4
    .venv/bin/python bench/policies.py --render bench/results/policies.json   # docs from a saved run

With ``--mixed``, mixed traffic instead (:mod:`bench._mixed`): an interactive stream and a
batch stream with loose targets, the batch share at 20% and 50%, goodput per class for
adaptive with classes, gpu-priority (strict priority on the GPU alone), gpu-only and classic;
it writes the "Mixed traffic" section of docs/benchmarks.md.

    .venv/bin/python bench/policies.py --mixed --windows 2 --window 300
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench import _mixed_plan, _mixed_report, _report, _sweep
from bench._common import results_dir
from bench._mixed import MIXED
from bench._scenarios import POLICIES, QUICK_SWEEP, SCENARIOS, SWEEP, pick
from bench._workloads import HELD_OUT, MOONCAKE, WORKLOADS, WorkloadError, choose
from sim.arrival_grid import REPLAYS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = ROOT.parent / "shared" / "traces"
DOCS = ROOT / "docs" / "benchmarks.md"
HANDOFFS = ("syshax", "kv-transfer", "recompute", "llamacpp-slots")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny run: one scenario, two workloads, three rates, 60 requests")
    p.add_argument("--out", type=Path, help="JSON report path (default bench/results/policies.json)")
    p.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help=f"trace directory (default {DEFAULT_TRACES})")
    p.add_argument("--seed", type=int, default=1, help="the first trace window (and its Poisson arrivals) (default 1)")
    p.add_argument("--windows", type=int, help="trace windows per point: seeds seed, seed+1, ... (default 3, quick 1)")
    p.add_argument("--requests", type=int, help="requests per run (default 1000, quick 60)")
    p.add_argument("--ttft", type=float, default=5.0, help="TTFT target in seconds (default 5)")
    p.add_argument("--tpot", type=float, default=0.2, help="TPOT target in seconds (default 0.2)")
    p.add_argument("--handoff", choices=HANDOFFS, default="syshax",
                   help="pd_split handoff protocol (default syshax, sysHAX's shared-KV fork)")
    p.add_argument("--workloads", help=f"comma-separated subset of {','.join(WORKLOADS)} (or the held-out "
                   f"{','.join(HELD_OUT)}, or {MOONCAKE}PATH: a Mooncake-format trace file)")
    p.add_argument("--scenarios", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    p.add_argument("--grid-replay", choices=REPLAYS, default="spread",
                   help="a trace whose timestamps sit on a coarse grid: spread each cell's arrivals within it "
                   "(default), or replay each cell as the burst it was recorded as (azure-bursts always does)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    p.add_argument("--mixed", action="store_true", help=f"mixed traffic ({', '.join(MIXED)}): goodput per class")
    p.add_argument("--window", type=float, help="seconds of traffic each sweep run offers at least (mixed: default "
                   f"{_mixed_plan.WINDOW_S:g}, quick 0)")
    p.add_argument("--docs", type=Path, help="update this Markdown file and its plots (default: docs/benchmarks.md on a full run)")
    p.add_argument("--no-docs", action="store_true", help="do not touch the docs")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="no runs: print the tables of a saved report and rewrite the docs from it")
    return p.parse_args(argv)


def build_plan(args: argparse.Namespace) -> dict[str, Any]:
    """Validated choices of the run (raises ValueError with a message for the user)."""
    if args.mixed:
        return mixed_plan(args)
    workloads = choose(args.workloads) if args.workloads else list(WORKLOADS)
    scenarios = pick(args.scenarios, SCENARIOS, "scenario")
    if args.quick:
        workloads = workloads if args.workloads else ["azure-conv", "sharegpt"]
        scenarios = scenarios if args.scenarios else ["a100-80g+q4"]
    requests = args.requests if args.requests is not None else (60 if args.quick else 1000)
    if requests < 2:
        raise ValueError(f"--requests must be at least 2, got {requests}")
    if args.ttft <= 0 or args.tpot <= 0:
        raise ValueError("--ttft and --tpot must be positive")
    windows = args.windows if args.windows is not None else (1 if args.quick else 3)
    if windows < 1:
        raise ValueError(f"--windows must be at least 1, got {windows}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {args.jobs}")
    if not args.traces.is_dir():
        raise ValueError(f"trace directory {args.traces} does not exist: pass --traces DIR "
                         "(the workspace keeps the traces in ../shared/traces beside the checkout)")
    return {
        "workloads": workloads, "scenarios": scenarios, "policies": list(POLICIES),
        "sweep": list(QUICK_SWEEP if args.quick else SWEEP), "requests": requests, "seed": args.seed,
        "seeds": list(range(args.seed, args.seed + windows)),
        "ttft_target": args.ttft, "tpot_target": args.tpot, "handoff": args.handoff, "quick": args.quick,
        "grid_replay": args.grid_replay,
        "capacity_share": _sweep.CAPACITY_SHARE, "cpu_alone_requests": _sweep.CPU_ALONE_REQUESTS,
    }


def mixed_plan(args: argparse.Namespace) -> dict[str, Any]:
    """Validated choices of a mixed-traffic run (raises ValueError with a message for the user)."""
    workloads = [w.strip() for w in (args.workloads or ",".join(MIXED)).split(",") if w.strip()]
    unknown = [w for w in workloads if w not in MIXED]
    if unknown or not workloads:
        raise ValueError(f"unknown mixed workload {', '.join(unknown) or repr(args.workloads)}; choose from "
                         f"{', '.join(MIXED)}")
    if args.quick:
        workloads = workloads if args.workloads else ["mixed-50"]
    window = args.window if args.window is not None else (0.0 if args.quick else _mixed_plan.WINDOW_S)
    if window < 0:
        raise ValueError(f"--window must not be negative, got {window:g}")
    plan = build_plan(argparse.Namespace(**{**vars(args), "mixed": False, "workloads": "azure-conv"}))
    plan.update(workloads=workloads, policies=list(_mixed_plan.POLICIES), window=window, mixed=True,
                requests=args.requests if args.requests is not None else (60 if args.quick else 200),
                seeds=list(range(args.seed, args.seed + (args.windows or 1))))
    return plan


def run(plan: dict[str, Any], settings: _sweep.Settings, jobs: int, console: Console) -> dict[str, Any]:
    """The three phases with a progress bar; the report as plain data."""
    gpus = sorted({SCENARIOS[s].gpu_profile for s in plan["scenarios"]})
    cpus = sorted({SCENARIOS[s].cpu_profile for s in plan["scenarios"]})
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        def phase(title: str, tasks: list[_sweep.Task]) -> list[dict[str, Any]]:
            bar = progress.add_task(title, total=len(tasks))
            return _sweep.run_all(tasks, jobs, lambda: progress.advance(bar))

        if plan.get("mixed"):
            return _mixed_plan.run(plan, settings, phase)
        keys1 = [(w, g) for w in plan["workloads"] for g in gpus]
        keys2 = [(w, c) for w in plan["workloads"] for c in cpus]
        first = phase("capacities and the CPU alone",
                      [(_sweep.gpu_capacity, (settings, w, g)) for w, g in keys1]
                      + [(_sweep.cpu_alone, (settings, w, c)) for w, c in keys2])
        capacity = dict(zip(keys1, first[: len(keys1)], strict=True))
        alone = dict(zip(keys2, first[len(keys1):], strict=True))
        swept = _sweep.policy_sweep(plan, settings, capacity, phase, "policy sweep")
    report: dict[str, Any] = {"benchmark": "policies", "config": plan, "workloads": {}}
    for w in plan["workloads"]:
        block: dict[str, Any] = {"scenarios": {}}
        for s in plan["scenarios"]:
            sc = SCENARIOS[s]
            cap, cpu = capacity[(w, sc.gpu_profile)], alone[(w, sc.cpu_profile)]
            runs = [dict(swept(w, s, p, f)) for p in plan["policies"] for f in plan["sweep"]]
            gpu_best = max([cap["best_goodput"]] + [r["goodput"] for r in runs if r["policy"] == "gpu-only"])
            ceiling = gpu_best + cpu["best_goodput"]
            for r in runs:
                r["ceiling_fraction"] = r["goodput"] / ceiling if ceiling > 0 else 0.0
            block["scenarios"][s] = {
                "summary": sc.summary, "gpu_profile": sc.gpu_profile, "cpu_profile": sc.cpu_profile,
                "capacity": cap["capacity"], "capacity_met": cap.get("capacity_met", True),
                "attainment_floor": cap.get("attainment_floor"), "capacity_goal": cap.get("capacity_goal"),
                "gpu_saturated_rps": cap["saturated_rps"], "capacity_search": cap["tried"],
                "gpu_alone_goodput": gpu_best, "cpu_alone": cpu, "cpu_alone_goodput": cpu["best_goodput"],
                "ceiling": ceiling, "runs": runs,
            }
        report["workloads"][w] = block
    return report


def add_targets(report: dict[str, Any]) -> list[tuple[str, list[_report.Check]]]:
    """The issue's targets on the Azure conversation trace, per scenario (into the report too)."""
    out = []
    if "azure-conv" in report["workloads"]:
        for s in report["workloads"]["azure-conv"]["scenarios"]:
            checks = _report.check_targets(report, "azure-conv", s)
            report["workloads"]["azure-conv"]["scenarios"][s]["targets"] = [c.__dict__ for c in checks]
            out.append((s, checks))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success, 2 on bad options or traces."""
    args = parse_args(argv)
    # Tables are wide: keep them readable when the output goes to a file or a pipe.
    console = Console(width=None if sys.stdout.isatty() else 200)
    t0 = time.monotonic()
    if args.render is not None:
        try:
            report = json.loads(args.render.read_text(encoding="utf-8"))
            plan = report["config"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            console.print(f"[red]error:[/] cannot use {args.render} as a policies report: {exc}")
            return 2
    else:
        try:
            plan = build_plan(args)
        except ValueError as exc:
            console.print(f"[red]error:[/] {exc}")
            return 2
        settings = _sweep.Settings(args.traces.resolve(), tuple(plan["seeds"]), plan["requests"], plan["ttft_target"],
                                   plan["tpot_target"], plan["handoff"], plan["grid_replay"], plan.get("window", 0.0))
        try:
            report = run(plan, settings, args.jobs, console)
        except WorkloadError as exc:
            console.print(f"[red]error:[/] {exc}")
            return 2
    if plan.get("mixed"):
        return finish_mixed(args, report, console, t0)
    checks = add_targets(report)
    for w in plan["workloads"]:
        for s in plan["scenarios"]:
            console.print(_report.rich_table(report, w, s))
    for s, cs in checks:
        console.print(_report.checks_table(cs, f"Targets on azure-conv, {s}"))
    out = args.out or (args.render if args.render is not None else results_dir() / "policies.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    docs = args.docs or (None if plan.get("quick") or args.no_docs else DOCS)
    if docs is not None and not args.no_docs:
        from bench import _docs  # matplotlib costs a second to import: only when writing docs

        written = _docs.write(report, docs, console)
        console.print(f"docs: {docs} and {len(written)} plots")
    console.print(f"JSON: {out}  ({time.monotonic() - t0:.0f} s)")
    return 0


def finish_mixed(args: argparse.Namespace, report: dict[str, Any], console: Console, t0: float) -> int:
    """Print a mixed-traffic report's tables, write its JSON and (full run) its docs section."""
    plan = report["config"]
    for w in plan["workloads"]:
        for s in plan["scenarios"]:
            block = report["workloads"][w]["scenarios"][s]
            block["checks"] = _mixed_plan.checks(block)  # a saved report is judged by the checks of today
            console.print(_mixed_report.rich_table(report, w, s))
        console.print(_mixed_report.checks_table(report, w))
    out = args.out or (args.render if args.render is not None else results_dir() / "policies-mixed.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    docs = args.docs or (None if plan.get("quick") or args.no_docs else DOCS)
    if docs is not None and not args.no_docs:
        from bench import _mixed_docs  # matplotlib costs a second to import: only when writing docs

        written = _mixed_docs.write(report, docs)
        console.print(f"docs: {docs} (Mixed traffic) and {len(written)} plots")
    console.print(f"JSON: {out}  ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
