"""``syshax calibrate``: measure a live engine and write a simulator profile fitted to it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.calibrate.stability import REPEATS, SPREAD
from syshaxd.cli import CommandError, UsageError


def _positive(kind: type[int] | type[float]) -> argparse._ActionType:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``syshax calibrate``."""
    p = sub.add_parser(
        "calibrate",
        help="measure a live engine (vLLM or llama-server) and write a simulator profile fitted to it",
        description="Time prefill against prompt length and decode steps against batch size and context "
        "through the engine's own API, fit the simulator's step model, and write a profile YAML "
        "(`syshax sim --profile PATH`). Measures in repeats until the fits agree (or says they do not). Refuses "
        "an engine that is serving traffic, syshaxd itself (it names the engines instead) and a --device that "
        "contradicts the engine's own, unless --force.",
    )
    p.add_argument("url", help="the engine's base URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--dialect", choices=("auto", "vllm-v1", "llamacpp"), default="auto",
                   help="engine kind (default: auto, from /props and /metrics)")
    p.add_argument("--out", "-o", type=Path, metavar="PATH", help="profile file to write (default ./NAME.yaml)")
    p.add_argument("--name", help="profile name (default calibrated-DIALECT-PORT)")
    p.add_argument("--base", metavar="PROFILE",
                   help="profile for what is not measured (default cpu-kunpeng920-q4 for llama.cpp, gpu-a100 for vLLM)")
    p.add_argument("--device", choices=("gpu", "cpu"), help="device of the profile (default: the base's)")
    p.add_argument("--model", help="model name to request (default: the first of /v1/models)")
    p.add_argument("--budget", type=_positive(float), default=120.0, metavar="SECONDS",
                   help="stop measuring after this long (default 120)")
    p.add_argument("--max-prompt", type=_positive(int), default=2048, metavar="N", help="longest prompt (default 2048)")
    p.add_argument("--max-batch", type=_positive(int), default=16, metavar="N", help="largest decode batch (default 16)")
    p.add_argument("--decode-tokens", type=_positive(int), default=64, metavar="N",
                   help="tokens per decode probe (default 64)")
    p.add_argument("--rounds", type=_positive(int), default=3, metavar="N",
                   help="times each point is measured, budget permitting; medians are fitted (default 3)")
    p.add_argument("--settle", type=_positive(float), default=20.0, metavar="SECONDS",
                   help="keep repeating the rounds for at least this long, so one burst of other load "
                        "does not skew the medians (default 20)")
    p.add_argument("--repeats", type=_positive(int), default=REPEATS, metavar="N",
                   help=f"measure and fit up to N times, until the fits agree within --spread (default {REPEATS})")
    p.add_argument("--spread", type=_positive(float), default=SPREAD, metavar="SHARE",
                   help="the largest spread of the repeats' predicted TTFTs and step times called stable "
                        f"(default {SPREAD:g}: {SPREAD:.0%})")
    p.add_argument("--force", action="store_true",
                   help="measure even while the engine serves other requests, when the URL is syshaxd, or when "
                        "--device contradicts the engine's own")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Run the calibration with a progress bar (a line per phase without a terminal), then print the summary."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    from sim.calibrate.calibrate import CalibrateError, Options, calibrate
    from sim.calibrate.report import summary_table

    if args.decode_tokens < 2:
        raise UsageError("--decode-tokens must be at least 2 (a gap needs two tokens)")
    opts = Options(url=args.url, dialect=args.dialect, out=args.out, name=args.name, base=args.base,
                   device=args.device, model=args.model, budget=args.budget, max_prompt=args.max_prompt,
                   max_batch=args.max_batch, decode_tokens=args.decode_tokens, rounds=args.rounds,
                   settle=args.settle, force=args.force, repeats=args.repeats, spread=args.spread)
    console = Console(stderr=True)
    try:
        if console.is_terminal:
            with Progress(TextColumn("{task.description:<56}"), BarColumn(), TaskProgressColumn(),
                          TimeElapsedColumn(), TextColumn(f"budget {args.budget:g} s"), console=console,
                          transient=True) as bar:
                task = bar.add_task("reading the engine", total=None)

                def show(label: str, done: int, total: int) -> None:
                    bar.update(task, description=label, completed=done, total=total)

                cal = calibrate(opts, progress=show, phase=lambda text: bar.update(task, description=text))
        else:
            # No terminal (a log, a pipe): one line per phase, not a bar redrawn per probe.
            cal = calibrate(opts, phase=lambda text: print(f"calibrate: {text}", file=sys.stderr, flush=True))
    except CalibrateError as exc:
        raise CommandError(str(exc)) from None
    out = Console()
    out.print(summary_table(cal))
    for note in cal.notes:
        out.print(f"note: {note}", soft_wrap=True)
    out.print(cal.stability.sentence(), style="" if cal.stability.stable else "bold yellow", soft_wrap=True)
    return 0
