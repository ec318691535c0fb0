"""The simulator's command line: ``syshax sim`` and ``python -m sim`` share it.

``python -m sim`` (what the launch helpers start) imports only this module and its
errors, not the ``syshax`` CLI package, whose config models take a third of a second to
import; each command imports what it runs (the server, the runner) when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sim.errors import CommandError, UsageError

if TYPE_CHECKING:
    from sim.engine import EngineOptions

DIALECTS = ("vllm-v1", "vllm-v0", "llamacpp", "sglang")


def positive_float(text: str) -> float:
    """An argparse type: a number above 0 (``syshax sim`` and ``syshax demo`` take speeds and rates so)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (0 = any free port), got {value}")
    return value


def _common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--speed", type=positive_float, default=1.0, metavar="S",
                   help="time scale: 20 runs 20 times faster than real time (default 1)")
    p.add_argument("--served-model-name", default="ds-32b", metavar="M", help="model name clients use (default ds-32b)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault dice (default 0)")
    p.add_argument("--slot-save-path", type=Path, metavar="DIR", help="llama.cpp dialect: where slot files go")
    p.add_argument("--ready-file", type=Path, metavar="PATH",
                   help="write the bound ports as JSON here once listening (for launchers)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="uvicorn log level (default warning)")


def _same(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    return func


def add_arguments(p: argparse.ArgumentParser,
                  wrap: Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]] = _same) -> None:
    """The options of ``sim`` (one engine) and its ``pair`` / ``profiles`` / ``replay`` subcommands.

    ``wrap`` decorates each command function (the ``syshax`` CLI maps errors with it).
    """
    p.add_argument("--profile", default="gpu-a100", metavar="P",
                   help="device profile name or YAML path (default gpu-a100; see `sim profiles`)")
    p.add_argument("--port", type=_port, default=8001, help="port (default 8001; 0 = any free port)")
    p.add_argument("--dialect", choices=DIALECTS, default="vllm-v1", help="/metrics dialect (default vllm-v1)")
    p.add_argument("--fault", action="append", default=[], metavar="KEY=VALUE",
                   help="start with a fault on, e.g. metrics=hang or error_rate=0.5 (repeatable)")
    p.add_argument("--parallel", "-np", type=int, metavar="N", help="sequences at once (llama.cpp slots); default: the profile's")
    p.add_argument("--ctx-size", "-c", type=int, metavar="N",
                   help="llama.cpp: context tokens shared by the slots (per slot: N / -np, capped at the model's); "
                        "default: -np x the model's context")
    p.add_argument("--name", default="sim", help="engine name in logs and /sim/stats (default sim)")
    _common_args(p)
    p.set_defaults(func=wrap(cmd_sim))
    sub = p.add_subparsers(dest="sim_command", metavar="SUBCOMMAND")
    pair = sub.add_parser("pair", help="a GPU and a CPU engine in one process, sharing handed-off KV caches")
    pair.add_argument("--gpu-port", type=_port, default=8001, help="GPU engine port (default 8001)")
    pair.add_argument("--cpu-port", type=_port, default=8002, help="CPU engine port (default 8002)")
    pair.add_argument("--gpu-profile", default="gpu-a100", metavar="P", help="default gpu-a100")
    pair.add_argument("--cpu-profile", default="cpu-kunpeng920-q4", metavar="P", help="default cpu-kunpeng920-q4")
    pair.add_argument("--gpu-dialect", choices=DIALECTS, default="vllm-v1")
    pair.add_argument("--cpu-dialect", choices=DIALECTS, default="vllm-v1")
    pair.add_argument("--gpu-fault", action="append", default=[], metavar="KEY=VALUE", help="fault on the GPU engine")
    pair.add_argument("--cpu-fault", action="append", default=[], metavar="KEY=VALUE", help="fault on the CPU engine")
    pair.add_argument("--parallel", "-np", type=int, metavar="N",
                      help="llama.cpp: slots on both engines (default: the smaller profile's sequences)")
    pair.add_argument("--ctx-size", "-c", type=int, metavar="N",
                      help="llama.cpp: context tokens on both engines (default: -np x the model's context)")
    _common_args(pair)
    pair.set_defaults(func=wrap(cmd_pair))
    profiles = sub.add_parser("profiles", help="list the shipped device profiles and their headline numbers")
    profiles.set_defaults(func=wrap(cmd_profiles))
    replay = sub.add_parser("replay", help="replay a trace through simulated engines and a policy, in virtual time")
    replay.add_argument("--trace", default="azure-conv", help="azure-conv, sharegpt, arxiv, or a CSV path (default azure-conv)")
    replay.add_argument("--limit", type=int, default=2000, help="requests to replay (default 2000)")
    replay.add_argument("--rate", type=float, help="requests/s (length-only traces: Poisson rate; timestamped: rescale)")
    replay.add_argument("--policy", default="classic", help="classic, adaptive, gpu-only, cpu-only, round-robin")
    replay.add_argument("--gpu", action="append", default=[], metavar="PROFILE", help="a GPU engine (repeatable; default gpu-a100)")
    replay.add_argument("--cpu", action="append", default=[], metavar="PROFILE", help="a CPU engine (repeatable; default cpu-kunpeng920-q4)")
    replay.add_argument("--handoff", default="syshax", choices=["syshax", "kv-transfer", "llamacpp-slots", "recompute"])
    replay.add_argument("--seed", type=int, default=0, help="seed of drawn arrivals (default 0)")
    replay.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a decider limit, e.g. auto_pd_offload=true or cpu_max_batch_size=10 (repeatable)")
    replay.add_argument("--json", type=Path, metavar="PATH", help="also write the summary and per-request records here")
    replay.set_defaults(func=wrap(cmd_replay))


def _engine(args: argparse.Namespace, *, name: str, profile: str, dialect: str, faults: list[str],
            parallel: int | None = None, ctx_size: int | None = None) -> EngineOptions:
    from sim.engine import EngineOptions
    from sim.faults import FaultError, parse_assignments
    from sim.profile import ProfileError, load_profile

    try:
        prof = load_profile(profile)
        fault_set = parse_assignments(faults)
    except (ProfileError, FaultError) as exc:
        raise UsageError(str(exc)) from None
    if parallel is not None and parallel < 1:
        raise UsageError(f"--parallel must be at least 1, got {parallel}")
    if ctx_size is not None and ctx_size < (parallel or 1):
        raise UsageError(f"--ctx-size must be at least one token per slot, got {ctx_size}")
    if args.slot_save_path is not None and not args.slot_save_path.is_dir():
        raise UsageError(f"--slot-save-path {args.slot_save_path} is not a directory")
    return EngineOptions(profile=prof, name=name, dialect=dialect, served_model_name=args.served_model_name,
                         speed=args.speed, faults=fault_set, seed=args.seed, slot_save_path=args.slot_save_path,
                         parallel=parallel, ctx_size=ctx_size, host=args.host)


def _run(args: argparse.Namespace, specs: list[tuple[EngineOptions, int]]) -> int:
    from sim.engine import SimEngine
    from sim.handoff import KvStore
    from sim.serve import bind, serve

    store = KvStore()
    sockets = []
    try:
        for _, port in specs:
            sockets.append(bind(args.host, port))
    except OSError as exc:
        for s in sockets:
            s.close()
        raise CommandError(str(exc)) from None

    async def main() -> None:
        engines = [SimEngine(opts, store) for opts, _ in specs]
        await serve(engines, sockets, ready_file=args.ready_file, log_level=args.log_level)

    asyncio.run(main())
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    """Run one simulated engine."""
    opts = _engine(args, name=args.name, profile=args.profile, dialect=args.dialect, faults=args.fault,
                   parallel=args.parallel, ctx_size=args.ctx_size)
    return _run(args, [(opts, args.port)])


def cmd_pair(args: argparse.Namespace) -> int:
    """Run a GPU and a CPU engine sharing handed-off KV."""
    if args.gpu_port == args.cpu_port and args.gpu_port != 0:
        raise UsageError(f"--gpu-port and --cpu-port are both {args.gpu_port}")
    gpu = _engine(args, name="gpu", profile=args.gpu_profile, dialect=args.gpu_dialect, faults=args.gpu_fault,
                  parallel=args.parallel, ctx_size=args.ctx_size)
    cpu = _engine(args, name="cpu", profile=args.cpu_profile, dialect=args.cpu_dialect, faults=args.cpu_fault,
                  parallel=args.parallel, ctx_size=args.ctx_size)
    if gpu.dialect == cpu.dialect == "llamacpp":
        gpu, cpu = _llama_pair(gpu, cpu)
    return _run(args, [(gpu, args.gpu_port), (cpu, args.cpu_port)])


def _llama_pair(gpu: EngineOptions, cpu: EngineOptions) -> tuple[EngineOptions, EngineOptions]:
    """Two llama-servers as a slot-handoff deployment runs them: same flags, same model file.

    Two profiles of one model (e.g. bf16 on the GPU, q4 on the CPU) then load the CPU
    side's file; the profiles still set each side's speed. Different models stay different,
    so the conductor's pair check refuses them as it would refuse two real servers.
    """
    from dataclasses import replace

    from sim.llama_server import model_file, pair_layout

    slots, ctx = pair_layout(gpu.profile, cpu.profile, gpu.parallel, gpu.ctx_size)
    gpu, cpu = replace(gpu, parallel=slots, ctx_size=ctx), replace(cpu, parallel=slots, ctx_size=ctx)
    if gpu.profile.model_name == cpu.profile.model_name:
        shared = model_file(cpu.profile)
        gpu, cpu = replace(gpu, model_file=shared), replace(cpu, model_file=shared)
    return gpu, cpu


def cmd_profiles(args: argparse.Namespace) -> int:
    """Print the shipped profiles."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from sim import timing
    from sim.profile import load_profile, profile_names

    table = Table(title="simulator device profiles")
    table.add_column("profile", no_wrap=True)
    table.add_column("summary")
    for col in ("KV tokens", "TPOT b=1", "tok/s b=32", "TTFT 2048"):
        table.add_column(col, justify="right", no_wrap=True)
    for name in profile_names():
        p = load_profile(name)
        tpot = timing.decode_step_time(p, [1024])
        b32 = 32 / timing.decode_step_time(p, [1024] * 32)
        table.add_row(name, escape(p.summary), f"{p.kv_capacity_tokens:,}", f"{tpot * 1000:.1f} ms", f"{b32:,.0f}",
                      f"{timing.prefill_time(p, 2048):.3g} s")
    Console().print(table)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a trace in virtual time and print the summary."""
    from sim.replay_cli import replay

    return replay(args)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sim``: the same options as ``syshax sim``."""
    parser = argparse.ArgumentParser(prog="python -m sim", description="syshax engine simulator")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"sim: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"sim: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
