"""``syshax numa``: plan or check the CPU engine's NUMA binding."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from syshaxd.cli._common import CommandError, UsageError
from syshaxd.monitor import (
    RULE_TEXT,
    Binding,
    PlanError,
    Topology,
    binding_notes,
    check_binding,
    format_cpulist,
    parse_check_arg,
    plan_binding,
    read_topology,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``syshax numa``."""
    p = sub.add_parser(
        "numa",
        help="plan or check the CPU engine's NUMA binding",
        description="Print the CPU inference engine's binding for this host, following sysHAX's rules: "
        + "; ".join(f"{name}: {text}" for name, text in RULE_TEXT.items())
        + ". Printed as OMP_NUM_THREADS/CUSTOM_CPU_AFFINITY for a CPU vLLM and as llama.cpp flags.",
    )
    p.add_argument(
        "--cores", type=int, metavar="N", help="bind N CPUs instead of as many as the rules allow"
    )
    p.add_argument(
        "--smt", action="store_true", help="also bind SMT siblings (default: one thread per core)"
    )
    p.add_argument(
        "--check",
        metavar="BINDING",
        help='check a binding instead: a cpulist ("0-159") or "OMP_NUM_THREADS=160 CUSTOM_CPU_AFFINITY=0-159"',
    )
    p.add_argument(
        "--threads", type=int, metavar="N", help="with --check: the engine's thread count"
    )
    p.add_argument(
        "--sysfs", metavar="ROOT", default="/sys", help="sysfs root to read (default /sys)"
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=cmd_numa)


def cmd_numa(args: argparse.Namespace) -> int:
    """Plan (default) or check (``--check``) a binding."""
    sysfs = Path(args.sysfs)
    if not sysfs.is_dir():
        raise UsageError(f"--sysfs {sysfs}: no such directory")
    topo = read_topology(sysfs)
    console = Console()
    if args.check is not None:
        return _check(console, topo, args)
    if args.threads is not None:
        raise UsageError(
            "--threads goes with --check (a planned binding always uses one thread per CPU)"
        )
    try:
        binding = plan_binding(topo, cores=args.cores, smt=args.smt)
    except PlanError as exc:
        raise CommandError(str(exc)) from None
    if args.json:
        print(json.dumps(_plan_json(binding), indent=2))
        return 0
    _print_topology(console, topo, binding.cpus)
    _print_plan(console, binding)
    return 0


def _check(console: Console, topo: Topology, args: argparse.Namespace) -> int:
    if args.cores is not None:
        raise UsageError("--cores plans a binding; it cannot be combined with --check")
    try:
        cpus, threads = parse_check_arg(args.check)
    except ValueError as exc:
        raise UsageError(f"--check {args.check!r}: {exc}") from None
    if args.threads is not None:
        if threads is not None and threads != args.threads:
            raise UsageError(
                f"--threads {args.threads} contradicts OMP_NUM_THREADS={threads} in --check"
            )
        threads = args.threads
    violations = check_binding(topo, cpus, threads)
    notes = binding_notes(topo, cpus)
    if args.json:
        print(
            json.dumps(
                {
                    "cpus": format_cpulist(cpus),
                    "ok": not violations,
                    "violations": [{"rule": v.rule, "detail": v.detail} for v in violations],
                    "notes": notes,
                },
                indent=2,
            )
        )
        return 1 if violations else 0
    _print_topology(console, topo, cpus)
    for note in notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    if violations:
        for v in violations:
            console.print(f"BROKEN: {v}", style="bold red", markup=False, highlight=False)
        console.print(
            f"binding {format_cpulist(cpus)} breaks {len(violations)} rule(s)", markup=False
        )
        return 1
    console.print(
        f"OK: binding {format_cpulist(cpus)} follows the rules ({len(cpus)} CPUs"
        + (f", {threads} threads" if threads is not None else "")
        + ")",
        style="green",
        markup=False,
        highlight=False,
    )
    return 0


def _print_topology(console: Console, topo: Topology, bound: tuple[int, ...]) -> None:
    table = Table(title="NUMA topology", title_justify="left")
    table.add_column("node", justify="right")
    table.add_column("online CPUs")
    table.add_column("count", justify="right")
    table.add_column("bound", justify="right")
    table.add_column("memory", justify="right")
    chosen = set(bound)
    for node in topo.nodes:
        mem = f"{node.mem_total / 2**30:.1f} GiB" if node.mem_total else "-"
        table.add_row(
            str(node.id),
            format_cpulist(node.cpus) or "-",
            str(len(node.cpus)),
            str(len(chosen & set(node.cpus))),
            mem,
        )
    console.print(table)


def _print_plan(console: Console, binding: Binding) -> None:
    env = binding.vllm_env()
    out = console.print
    out(
        f"CPU engine binding: {binding.threads} CPUs, {binding.per_node} on each of "
        f"{len(binding.nodes)} node(s) ({format_cpulist(binding.nodes)})",
        markup=False,
        highlight=False,
    )
    for note in binding.notes:
        out(f"note: {note}", markup=False, highlight=False)
    out("\nCPU vLLM (sysHAX):", style="bold")
    out(
        f"  OMP_NUM_THREADS={env['OMP_NUM_THREADS']} CUSTOM_CPU_AFFINITY={env['CUSTOM_CPU_AFFINITY']}",
        markup=False,
        highlight=False,
    )
    out("upstream vLLM CPU backend:", style="bold")
    out(
        f"  VLLM_CPU_OMP_THREADS_BIND={env['VLLM_CPU_OMP_THREADS_BIND']}",
        markup=False,
        highlight=False,
    )
    out("llama.cpp (llama-server):", style="bold")
    out(f"  {binding.llamacpp_command()}", markup=False, highlight=False, soft_wrap=True)
    out("  or, for builds without OpenMP:", markup=False, highlight=False)
    out(
        f"  llama-server {binding.llamacpp_mask_flags()}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _plan_json(binding: Binding) -> dict[str, object]:
    return {
        "cpus": binding.cpulist,
        "threads": binding.threads,
        "nodes": list(binding.nodes),
        "per_node": binding.per_node,
        "env": binding.vllm_env(),
        "llamacpp": binding.llamacpp_command(),
        "llamacpp_mask": binding.llamacpp_mask_flags(),
        "notes": list(binding.notes),
    }
