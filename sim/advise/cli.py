"""``syshax advise``: replay the daemon's recorded traffic under each setting and recommend one.

Registered through the ``syshax.commands`` entry point. The steps are the modules of this
package: read the window and the daemon's classes (:mod:`~sim.advise.daemon`,
:mod:`~sim.advise.window`, :mod:`~sim.advise.levels`), advise on it (:mod:`~sim.advise.flow`:
the self-check, the replays of :mod:`~sim.advise.predict`, the choice, which class the CPU
should serve) and show it (:mod:`~sim.advise.table`). The advice is always sent to the daemon
(``POST /v1/advice``) so the console shows it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim.advise import check, daemon, flow, levels, options, predict, table, window
from sim.calibrate.identity import PROBE_ID_PREFIX
from syshaxd.cli import CommandError, UsageError
from syshaxd.cli.control import ControlClient, connect
from syshaxd.routing import Limits
from syshaxd.schema import AdviceModel, StateModel

__all__ = ["REFUSED", "register", "run"]

#: The exit code when advise recommends nothing (its self-check failed; see sim.advise.check).
REFUSED = 3


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``syshax advise``."""
    p = sub.add_parser(
        "advise", help="replay the daemon's recorded traffic under each policy and setting; recommend one",
        description="Replay the requests the running daemon recorded through the virtual-time simulator under "
        "gpu-only, classic and adaptive with a small grid of batch limits and auto-PD on/off, each request in its "
        "service class at its own targets (with several classes also gpu-priority and the CPU for some classes "
        "only); print each one's predicted goodput, throughput, TTFT, TPOT and CPU share, per class too, the "
        "current setting's predicted-vs-actual error on the same window, a recommendation, and which class the "
        "CPU should serve. It replays the current setting first and recommends "
        "nothing (exit 3) when that replay misses what happened by more than --max-error, the window is too "
        "thin or short, or a profile is not of its engine. The advice is sent to the daemon for the console.")
    # After the subcommand too, as the daemon's own commands take it (SUPPRESS keeps a --config
    # given before the subcommand).
    p.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="config file to use")
    p.add_argument("--socket", metavar="PATH", help="control socket (else control.socket, else the default locations)")
    p.add_argument("--last", type=int, metavar="N", help="replay the last N recorded requests (default: all kept)")
    p.add_argument("--gpu-profile", metavar="NAME|FILE",
                   help="GPU profile: a shipped name or a profile file (default: what a simulated GPU engine runs)")
    p.add_argument("--cpu-profile", metavar="NAME|FILE",
                   help="CPU profile: a shipped name or a profile file (default: what a simulated CPU engine runs)")
    p.add_argument("--speed", type=_positive, metavar="S",
                   help="the engines' clock speed-up (default: what simulated engines report, else 1)")
    p.add_argument("--apply", action="store_true",
                   help="switch the daemon to the recommended setting (one PATCH); refused when advise recommends "
                        "nothing")
    p.add_argument("--force", action="store_true",
                   help="advise (and --apply) even when the self-check fails; the warning is printed")
    p.add_argument("--max-error", type=_positive, default=check.MAX_ERROR, metavar="SHARE",
                   help="the largest error of the current setting's replay against what happened, on goodput, "
                        f"TTFT p50/p99, TPOT p50/p99 and output tokens/s, before advise refuses (default "
                        f"{check.MAX_ERROR:g}: {check.MAX_ERROR:.0%})")
    p.add_argument("--min-requests", type=int, default=check.MIN_REQUESTS, metavar="N",
                   help=f"the fewest recorded requests advise recommends from (default {check.MIN_REQUESTS})")
    p.add_argument("--min-seconds", type=_positive, default=check.MIN_SECONDS, metavar="S",
                   help=f"the shortest window advise recommends from, seconds (default {check.MIN_SECONDS:g})")
    p.add_argument("--json", action="store_true", help="print the advice as JSON (AdviceModel) instead of tables")
    p.set_defaults(func=run)


def _running_limits(state: StateModel) -> tuple[str, Limits]:
    """The policy and limits of the daemon's running config."""
    decider = {k.removeprefix("decider."): v for k, v in state.config.items() if k.startswith("decider.")}
    return str(decider.get("policy", "adaptive")), options.base_limits(decider)


def _replay(win: window.Window, settings: Sequence[options.Setting], base: Limits, box: predict.Box,
            how: predict.Daemon, console: Console) -> list[predict.Prediction]:
    n = len(win.trace)
    out = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("replaying", total=n * len(settings))
        for i, setting in enumerate(settings):
            bar.update(task, description=f"replaying {setting.label()}")

            def step(done: int, total: int, first: int = i * n) -> None:
                bar.update(task, completed=first + done)

            out.append(predict.predict(win, setting, base, box, how, step))
    return out


def _apply(client: ControlClient, advice: AdviceModel, console: Console) -> None:
    if advice.recommended is None:
        console.print("--apply: advise recommends nothing, so nothing changed (--force applies its best option "
                      "anyway)")
        return
    chosen = advice.options[advice.recommended]
    change = daemon.apply(client, chosen.settings)
    if not change.changed:
        console.print(f"--apply: the daemon already runs {chosen.label}; nothing changed")
        return
    console.print(f"--apply: now {chosen.label}; changed "
                  + ", ".join(_changed(key, value) for key, value in sorted(change.changed.items()))
                  + " (not saved: `syshax save` keeps it across restarts)")


def _changed(key: str, value: object) -> str:
    """``key = value``; the class table by the classes the CPU may serve."""
    if key == "service.classes" and isinstance(value, dict):
        on = [name for name, spec in value.items() if not isinstance(spec, dict) or spec.get("cpu", True)]
        return f"service.classes (the CPU for {', '.join(on) or 'no class'})"
    return f"{key} = {value}"


def _read(args: argparse.Namespace, client: ControlClient) -> tuple[window.Window, StateModel, levels.ClassTable]:
    if args.last is not None and args.last < 1:
        raise UsageError(f"--last must be at least 1, got {args.last}")
    records = daemon.fetch_records(client, args.last)
    state = daemon.fetch_state(client)
    classes = levels.class_table(state.config)
    # calibrate's probes measured an engine, they are not traffic (sim.calibrate.identity).
    traffic = [r for r in records if not r.request_id.startswith(PROBE_ID_PREFIX)]
    if len(traffic) < len(records):
        Console(stderr=True).print(f"note: {len(records) - len(traffic)} requests of `syshax calibrate`'s probes "
                                   "left out")
    records = traffic
    try:
        win = window.window_of(records, classes)
    except ValueError as exc:
        raise CommandError(f"nothing to advise on: {exc}") from None
    return win, state, classes


def run(args: argparse.Namespace) -> int:
    """Advise on the recorded window (see the module docstring); 3 when it recommends nothing."""
    # Tables are wide: keep them readable when the output goes to a file or a pipe.
    out = Console(width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True)
    bounds = check.Bounds(args.max_error, args.min_requests, args.min_seconds)
    client = connect(args)
    try:
        win, state, classes = _read(args, client)
        facts = daemon.engine_facts(state)
        box, profiles = daemon.box_of(facts, args.gpu_profile, args.cpu_profile, args.speed)
        misfits = check.profile_problems(daemon.roles(facts),
                                         daemon.profiles_used(facts, box, args.gpu_profile, args.cpu_profile))
        running_policy, running = _running_limits(state)
        # A record's limits carry its own class's targets: the decider's come from the running config.
        base = replace(options.base_limits(win.limits), ttft_target=running.ttft_target,
                       tpot_target=running.tpot_target) if win.limits else running
        current = options.current_setting(win.policy or running_policy, base)
        how = daemon.daemon_settings(state)
        case = flow.Case(win, classes, base, current, box.gpu_slots(), profiles, misfits)
        done = flow.advise(case, bounds, lambda settings: _replay(win, settings, base, box, how, err),
                           force=args.force, warn=lambda text: err.print(f"warning: {text}"))
        advice = done.advice
        daemon.post_advice(client, advice)
        if args.json:
            print(advice.model_dump_json(indent=2))
        else:
            _show(done, win, current, options.current_setting(running_policy, running), box, bounds, out)
        if args.apply:
            _apply(client, advice, err if args.json else out)
    finally:
        client.close()
    return REFUSED if advice.recommended is None else 0


def _show(done: flow.Advised, win: window.Window, current: options.Setting, running: options.Setting,
          box: predict.Box, bounds: check.Bounds, out: Console) -> None:
    advice = done.advice
    out.print(table.options_table(advice))
    if len(advice.classes) > 1:
        out.print(table.classes_table(advice))
    out.print(table.error_table(done.mine, done.actual, advice.current_error, bounds.max_error))
    _notes(win, current, running, box, out)
    out.print(advice.summary, soft_wrap=True)
    if advice.cpu_verdict:
        out.print(advice.cpu_verdict, soft_wrap=True)


def _notes(win: window.Window, current: options.Setting, running: options.Setting, box: predict.Box,
           console: Console) -> None:
    speed, slots = box.speed, box.gpu_slots()
    if win.unknown_classes:
        console.print(f"note: the class table no longer has {', '.join(win.unknown_classes)}: replayed at priority 0 "
                      "with the targets its records carry")
    if win.settings_seen > 1:
        console.print(f"note: the window ran under {win.settings_seen} settings; the error compares the last")
    if running != current:
        console.print(f"note: the window was recorded under {current.label(slots)}; the daemon now runs {running.label(slots)}")
    if speed != 1.0:
        console.print(f"note: simulated engines at speed {speed:g}: times are wall-clock seconds, as the daemon saw them")
