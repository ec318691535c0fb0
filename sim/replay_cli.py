"""``syshax sim replay``: a trace through simulated engines and a policy, in virtual time."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields, replace

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.errors import UsageError
from syshaxd.routing import Limits


def _limits(items: list[str], handoff: str) -> Limits:
    limits = Limits(handoff=handoff)  # type: ignore[arg-type]
    names = {f.name: f for f in fields(Limits)}
    changes: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in names or key == "handoff":
            known = ", ".join(sorted(n for n in names if n != "handoff"))
            raise UsageError(f"--set expects KEY=VALUE with KEY one of: {known}; got {item!r}")
        current = getattr(limits, key)
        try:
            if isinstance(current, bool):
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(text)
                changes[key] = text.lower() in ("true", "1", "yes")
            elif text.lower() in ("null", "none") and key == "gpu_max_batch_size":
                changes[key] = None
            elif isinstance(current, float):
                changes[key] = float(text)
            else:
                changes[key] = int(text)
        except ValueError:
            raise UsageError(f"--set {key}: {text!r} is not a valid {type(current).__name__}") from None
    return replace(limits, **changes)  # type: ignore[arg-type]


def replay(args: argparse.Namespace) -> int:
    """Run the replay described by the parsed arguments."""
    from sim.profile import ProfileError, load_profile
    from sim.report import summary_table
    from sim.runner import EngineSpec, run
    from sim.traces import TraceError, load_trace
    from syshaxd.policy import get_policy

    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    try:
        get_policy(args.policy)  # a clear error for an unknown name before anything runs
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    try:
        engines = [EngineSpec(f"gpu{i}", "gpu", load_profile(p)) for i, p in enumerate(args.gpu or ["gpu-a100"])]
        engines += [EngineSpec(f"cpu{i}", "cpu", load_profile(p)) for i, p in enumerate(args.cpu or ["cpu-kunpeng920-q4"])]
        work = load_trace(args.trace, limit=args.limit, rate=args.rate, seed=args.seed)
    except (ProfileError, TraceError) as exc:
        raise UsageError(str(exc)) from None
    limits = _limits(args.set, args.handoff)
    console = Console()
    with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("replay", total=len(work))
        result = run(work, engines, args.policy, limits, progress=lambda done, total: bar.update(task, completed=done))
    title = f"{args.trace} x{len(work)}, policy {args.policy}, handoff {args.handoff}"
    console.print(summary_table(result.summary, title))
    console.print("decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(result.decisions.items())))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_json(with_requests=True), indent=1), encoding="utf-8")
        console.print(f"wrote {args.json}")
    return 0
