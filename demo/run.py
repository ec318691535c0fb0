"""One demo run: start the stack, replay the workload, show the console (or status lines), clean up.

The order of the way out matters and is the same however the demo ends (``q`` in the
console, Ctrl-C, SIGTERM, ``--duration``, a crashed part): stop sending, cancel what is
in flight, read the conductor's final numbers, stop the console, then syshaxd (which
drains for a few seconds), then the engines, then remove the runtime directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from demo.load import LoadDriver
from demo.procs import Child, Interrupted, StartError, StopFlag, Supervisor
from demo.stack import Stack, StackOptions, runtime_root, start_stack
from demo.status import (
    build_summary,
    fetch_metrics,
    fetch_state,
    status_line,
    summary_tables,
)
from demo.workload import Trace, schedule
from sim.traces import CONTEXT_LIMIT

#: The console's quit binding, extended so Ctrl-C quits too (Textual's own Ctrl-C only hints).
CONSOLE_KEYMAP = 'quit: "q,ctrl+c"\n'


@dataclass(frozen=True)
class DemoOptions:
    """Everything ``syshax demo`` can be told."""

    stack: StackOptions
    trace: Trace
    load: float = 0.2
    duration: float | None = None
    headless: bool = False
    interval: float = 3.0
    json_summary: Path | None = None
    keep: bool = False  # keep the runtime directory (logs) for a post-mortem
    context_limit: int = CONTEXT_LIMIT  # prompt + output tokens per request


def run_demo(opts: DemoOptions, out: Console) -> int:
    """Run the demo until it is stopped; 0 after a clean run, 1 when a part failed."""
    root = runtime_root()
    sup = Supervisor(grace=10.0)
    flag = StopFlag()
    previous = flag.install()
    try:
        try:
            with out.status("starting the engines and syshaxd...", spinner="dots"):
                stack = start_stack(sup, root, opts.stack, stop=flag)
        except StartError as exc:
            out.print(f"[bold red]syshax demo:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
            return 1
        except Interrupted as exc:
            out.print(f"syshax demo: stopped while starting ({exc})")
            return 130
        try:
            return asyncio.run(_serve(opts, stack, sup, out, flag))
        finally:
            flag.install()  # asyncio put the default handlers back; keep signals harmless until cleaned up
    finally:
        with out.status("stopping...", spinner="dots") if out.is_terminal else contextlib.nullcontext():
            sup.stop_all()
        if opts.keep:
            out.print(f"logs and config kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        out.print(f"stopped {len(sup.children)} processes" + ("" if opts.keep else f"; removed {root}"))
        StopFlag.restore(previous)


async def _serve(opts: DemoOptions, stack: Stack, sup: Supervisor, out: Console, flag: StopFlag) -> int:
    stop = asyncio.Event()
    why: list[str] = []

    def request_stop(reason: str) -> None:
        if not why:
            why.append(reason)
        flag.set(reason)
        stop.set()

    if flag.reason:  # a signal between the start and here
        request_stop(flag.reason)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, request_stop, signal.Signals(sig).name)
    driver = LoadDriver(stack.api_url, schedule(opts.trace, opts.load, opts.stack.speed, opts.context_limit), model=stack.model)
    started = time.monotonic()
    load_task = asyncio.create_task(driver.run(stop))
    watch = asyncio.create_task(_watch(stack, opts, started, request_stop))
    headless = opts.headless
    _intro(opts, stack, out, headless)
    try:
        if headless:
            await _status_loop(opts, stack, driver, started, stop, out)
        else:
            saved = _terminal_modes()
            console = _start_console(stack, sup)
            exited = asyncio.ensure_future(asyncio.to_thread(console.proc.wait))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait([exited, stopped], return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if console.alive():
                # SIGINT, not SIGTERM: Textual then leaves the alternate screen and mouse mode.
                await asyncio.to_thread(sup.stop, console, 3.0, signal.SIGINT)
            else:
                request_stop("console closed")
            await exited
            _restore_terminal(saved, clean=console.proc.returncode in (0, -signal.SIGINT, 130))
        stop.set()
        await load_task
        async with httpx.AsyncClient(timeout=5.0) as client:
            numbers = await fetch_metrics(client, stack.api_url)
    finally:
        watch.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    elapsed = time.monotonic() - started
    summary = build_summary(
        duration=elapsed, policy=opts.stack.policy, handoff=opts.stack.handoff, load=opts.load,
        speed=opts.stack.speed, trace=opts.trace.source, numbers=numbers, tally=driver.tally,
    )
    out.print(f"stopping ({why[0] if why else 'done'})")
    for table in summary_tables(summary):
        out.print(table)
    if opts.json_summary is not None:
        summary.write(opts.json_summary)
        out.print(f"summary written to {opts.json_summary}")
    failed = [c for c in stack.processes if not c.alive()]
    if failed:
        out.print(f"[bold red]syshax demo:[/] {failed[0].name} exited with code {failed[0].proc.returncode} "
                  f"during the run\n{failed[0].log_tail()}", markup=True, highlight=False, soft_wrap=True)
        return 1
    return 0


async def _watch(stack: Stack, opts: DemoOptions, started: float, request_stop: Callable[[str], None]) -> None:
    """Stop when the duration is over or when a server process dies."""
    while True:
        await asyncio.sleep(0.5)
        for child in stack.processes:
            if not child.alive():
                request_stop(f"{child.name} exited with code {child.proc.returncode}")
                return
        if opts.duration is not None and time.monotonic() - started >= opts.duration:
            request_stop(f"--duration {opts.duration:g}s reached")
            return


def _intro(opts: DemoOptions, stack: Stack, out: Console, headless: bool) -> None:
    s = opts.stack
    engines = (
        "two real llama-servers (GPU and CPU roles)" if s.engines == "llama"
        else f"simulated {s.gpu_profile} + {s.cpu_profile} at {s.speed:g}x speed"
    )
    out.print(
        f"syshax demo: {engines}, "
        f"policy {s.policy}, handoff {s.handoff}, load {opts.load:g} x the trace's rate "
        f"({opts.trace.rate * opts.load:.1f} req/s simulated, {opts.trace.rate * opts.load * s.speed:.1f} req/s wall)",
        soft_wrap=True,
    )
    out.print(f"workload: {opts.trace.source}", highlight=False, soft_wrap=True)
    out.print(f"OpenAI API: {stack.api_url}/v1   control socket: {stack.socket_path}", highlight=False, soft_wrap=True)
    if headless:
        out.print(
            f"try, from another terminal:  syshax-console --socket {stack.socket_path}\n"
            f"                             syshax set --socket {stack.socket_path} decider.auto_pd_offload true\n"
            "stop with Ctrl-C" + (f"; stops by itself after {opts.duration:g}s" if opts.duration else ""),
            highlight=False,
            soft_wrap=True,
        )


async def _status_loop(
    opts: DemoOptions, stack: Stack, driver: LoadDriver, started: float, stop: asyncio.Event, out: Console
) -> None:
    async with httpx.AsyncClient(timeout=5.0) as client:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), opts.interval)
            if stop.is_set():
                return
            numbers = await fetch_metrics(client, stack.api_url)
            state = await fetch_state(stack.socket_path)
            now = time.monotonic()
            out.print(status_line(now - started, numbers, state, driver.tally, now), highlight=False, soft_wrap=True)


def _start_console(stack: Stack, sup: Supervisor) -> Child:
    keymap = stack.root / "console-keys.yaml"
    keymap.write_text(CONSOLE_KEYMAP, encoding="utf-8")
    argv = [
        sys.executable, "-c", "import sys; from console.cli import main; sys.exit(main())",
        "--socket", str(stack.socket_path), "--keymap", str(keymap),
    ]
    # Same process group as the demo: the console needs the terminal's foreground group.
    return sup.start("console", argv, own_group=False)


#: Leave the alternate screen, stop mouse and focus reporting and bracketed paste, show
#: the cursor: what a full-screen program undoes on a clean exit.
_TERMINAL_RESET = "\x1b[?1049l\x1b[?1000l\x1b[?1003l\x1b[?1006l\x1b[?1015l\x1b[?1004l\x1b[?2004l\x1b[?7h\x1b[?25h"


def _terminal_modes() -> list[Any] | None:
    """The terminal's settings before the console takes it over (None without a terminal)."""
    try:
        return termios.tcgetattr(sys.stdin.fileno())
    except (termios.error, OSError, ValueError):
        return None


def _restore_terminal(saved: list[Any] | None, *, clean: bool) -> None:
    """Put the terminal back as it was, also when the console was killed mid-screen."""
    if saved is None:
        return
    with contextlib.suppress(termios.error, OSError, ValueError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
    if not clean:
        sys.stdout.write(_TERMINAL_RESET)
        sys.stdout.flush()
