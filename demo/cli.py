"""``syshax demo``: the whole system in one command, on simulated (or real llama.cpp) engines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from demo.llama import CONTEXT_LIMIT as LLAMA_CONTEXT_LIMIT
from demo.stack import CPU_PROFILE, GPU_PROFILE, StackOptions
from demo.workload import TraceError, choose_trace
from sim.command import positive_float
from sim.traces import CONTEXT_LIMIT
from syshaxd.cli import UsageError
from syshaxd.config import ConfigError, coerce_value, validate

#: Simulated time runs this much faster than real time. At 3x a saturated simulated GPU
#: streams ~1,400 tokens/s through syshaxd and the client, about what two busy cores carry;
#: faster, the host's CPU becomes the bottleneck and the GPU looks idle while requests queue.
DEFAULT_SPEED = 3.0
POLICIES = ("adaptive", "classic", "gpu-only", "cpu-only", "round-robin")
HANDOFFS = ("syshax", "kv-transfer", "recompute", "llamacpp-slots")

DESCRIPTION = """\
Start a simulated GPU engine (2 x A100, a 32B model) and a simulated CPU engine (a
160-core Kunpeng 920, the same model in q4_0), syshaxd in front of them, a client
replaying a real request mix (the Azure LLM inference trace; the full hour when it is
beside the checkout, else a 400-request sample shipped with syshax), and the console.

In the console: g/c select a device, +/- change its batch limit, p toggles auto-PD
offload, P cycles the policy, ? shows every key, q (or Ctrl-C) stops everything.
Without a terminal (or with --headless) a status line is printed every few seconds.
Nothing is left behind: every process is stopped and the temporary directory removed.

With --engines llama, two real llama.cpp llama-servers (built once by `make engines`)
take the GPU and CPU roles instead of the simulator, handing KV caches over with the
llamacpp-slots protocol.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``syshax demo``."""
    p = sub.add_parser(
        "demo", help="run syshax on simulated engines with a replayed workload and the console",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--load", type=positive_float, default=0.2, metavar="X",
                   help="request rate as a multiple of the trace's (~5.5 req/s); default 0.2, "
                        "enough to saturate the GPU in bursts")
    p.add_argument("--policy", choices=POLICIES, default="classic",
                   help="scheduling policy (default classic: sysHAX's rules, whose GPU batch limit "
                        "sends the overflow to the CPU)")
    p.add_argument("--handoff", choices=HANDOFFS, default=None,
                   help="prefill/decode handoff protocol of the engine pair (default syshax; "
                        "llamacpp-slots with --engines llama)")
    p.add_argument("--speed", type=positive_float, default=None, metavar="X",
                   help="simulated time runs X times faster than real time (default 3; higher "
                        "speeds can make this machine's CPU, not the simulated GPU, the bottleneck)")
    p.add_argument("--duration", type=positive_float, default=None, metavar="SECONDS",
                   help="stop by itself after this many seconds (default: run until stopped)")
    p.add_argument("--headless", action="store_true",
                   help="print status lines instead of the console (automatic without a terminal)")
    p.add_argument("--interval", type=positive_float, default=3.0, metavar="SECONDS",
                   help="seconds between status lines when headless (default 3)")
    p.add_argument("--json-summary", type=Path, default=None, metavar="PATH",
                   help="also write the final summary as JSON to PATH")
    p.add_argument("--trace", default="auto", metavar="auto|sample|PATH",
                   help="workload: the full Azure trace if found beside the checkout, else the "
                        "packaged sample (auto); the sample; or an Azure-format CSV file")
    p.add_argument("--gpu-profile", default=GPU_PROFILE, help=f"simulator profile of the GPU engine ({GPU_PROFILE})")
    p.add_argument("--cpu-profile", default=CPU_PROFILE, help=f"simulator profile of the CPU engine ({CPU_PROFILE})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="a decider key in the demo's config, e.g. --set decider.cpu_max_batch_size=8 "
                        "(repeatable; default: decider.auto_pd_offload=true)")
    p.add_argument("--engines", choices=("sim", "llama"), default="sim",
                   help="simulated engines (default), or two real llama.cpp llama-servers built by "
                        "`make engines` in the GPU and CPU roles (try --load 1)")
    p.add_argument("--llama-server", metavar="PATH", help="with --engines llama: the llama-server binary")
    p.add_argument("--llama-model", metavar="PATH", help="with --engines llama: the GGUF model both load")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (config, logs) afterwards")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo."""
    from demo.run import DemoOptions, run_demo

    if args.json_summary is not None and not args.json_summary.parent.is_dir():
        raise UsageError(f"--json-summary: directory {args.json_summary.parent} does not exist")
    try:
        trace = choose_trace(args.trace)
    except TraceError as exc:
        raise UsageError(f"--trace: {exc}") from None
    llama = args.engines == "llama"
    if llama and args.speed is not None:
        raise UsageError("--speed only applies to simulated engines; real llama-servers run in real time")
    if llama and args.handoff in ("syshax", "kv-transfer"):
        raise UsageError(f"--handoff {args.handoff} needs vLLM engines; two llama-servers hand off with "
                         "llamacpp-slots (the default with --engines llama) or recompute")
    if not llama and (args.llama_server or args.llama_model):
        raise UsageError("--llama-server and --llama-model need --engines llama")
    handoff = args.handoff or ("llamacpp-slots" if llama else "syshax")
    decider = _decider_settings(args.settings, LLAMA_DECIDER if llama else DEMO_DECIDER)
    headless = args.headless or not (sys.stdout.isatty() and sys.stdin.isatty())
    options = DemoOptions(
        stack=StackOptions(
            policy=args.policy, handoff=handoff, speed=1.0 if llama else (args.speed or DEFAULT_SPEED),
            gpu_profile=args.gpu_profile, cpu_profile=args.cpu_profile, decider=decider,
            engines=args.engines, llama_server=args.llama_server, llama_model=args.llama_model,
        ),
        trace=trace, load=args.load, duration=args.duration, headless=headless,
        interval=args.interval, json_summary=args.json_summary, keep=args.keep,
        context_limit=LLAMA_CONTEXT_LIMIT if llama else CONTEXT_LIMIT,
    )
    return run_demo(options, Console(highlight=False))


#: What the demo changes from the defaults: splits by default, so all three routes show.
DEMO_DECIDER: dict[str, object] = {"auto_pd_offload": True}
#: Two llama-servers with 4 slots each: the batch limits follow their ``-np``.
LLAMA_DECIDER: dict[str, object] = {"auto_pd_offload": True, "gpu_max_batch_size": 4, "cpu_max_batch_size": 4}


def _decider_settings(settings: list[str], defaults: dict[str, object]) -> tuple[tuple[str, object], ...]:
    """``--set decider.KEY=VALUE`` options over ``defaults``, converted and validated like the config file."""
    values: dict[str, object] = dict(defaults)
    for item in settings:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. decider.cpu_max_batch_size=8")
        if not key.startswith("decider."):
            raise UsageError(f"--set {key}: only decider.* keys can be set for the demo")
        values[key.removeprefix("decider.")] = coerce_value(key, raw)
    try:
        validate({"decider": values})
    except ConfigError as exc:
        raise UsageError(f"--set: {exc}") from None
    return tuple(values.items())
