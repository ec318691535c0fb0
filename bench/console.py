"""What the console costs: its process CPU time over wall time while it follows a busy daemon.

A stand-in control API (tests/console/fakedaemon.py) sends a fresh 160-core, 4-engine
state 4 times a second (every number changes every time: a worst case), first alone, then
with a stream of routing decisions as well; the real ``syshax-console`` runs in a
pseudo-terminal of each size, as an operator would run it, and its CPU time is read from
/proc (psutil) over the measured window. Target: under 10% of one core for the states.

    python bench/console.py                 # 80x24 and 160x48, 30 s each
    python bench/console.py --quick         # a tiny run, as `make test` does
    python bench/console.py --svg docs/console.svg   # also save a screenshot under load
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import results_dir, stop_processes  # noqa: E402

TARGET_PERCENT = 10.0
console = Console()


def start_daemon(socket: Path, cores: int, engines: int, rate: float, decisions: float) -> subprocess.Popen[bytes]:
    """The stand-in daemon, as its own process, serving generated states."""
    log = socket.with_suffix(".log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.console.fakedaemon", "--socket", str(socket), "--cores", str(cores),
             "--engines", str(engines), "--rate", str(rate), "--decisions", str(decisions)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while not socket.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the stand-in daemon exited: {log.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError("the stand-in daemon did not create its socket within 30 s")
        time.sleep(0.05)
    return proc


class TerminalConsole:
    """``syshax-console`` in a pseudo-terminal of a fixed size, its output drained and dropped."""

    def __init__(self, socket: Path, size: tuple[int, int], refresh: float) -> None:
        """Start the console."""
        cols, rows = size
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        env.pop("NO_COLOR", None)
        code = "import sys; from console.cli import main; sys.exit(main())"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "--socket", str(socket), "--refresh", str(refresh)],
            stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env, start_new_session=True,
        )  # fmt: skip
        os.close(slave)
        self.bytes_out = 0
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.bytes_out += len(chunk)

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the console process so far."""
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        """Quit with ``q`` like an operator; force it if that does not work."""
        if self.proc.poll() is None:
            os.write(self.master, b"q")
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=5)
        os.close(self.master)
        self._reader.join(timeout=2)


def measure(socket: Path, size: tuple[int, int], refresh: float, warmup: float, seconds: float,
            progress: Progress) -> dict[str, Any]:  # fmt: skip
    """One run: the console's CPU share over ``seconds`` after ``warmup``."""
    term = TerminalConsole(socket, size, refresh)
    task = progress.add_task(f"{size[0]}x{size[1]} at {refresh:g}/s", total=warmup + seconds)
    try:
        start = time.monotonic()
        while time.monotonic() - start < warmup:
            if term.proc.poll() is not None:
                raise RuntimeError(f"the console exited with {term.proc.returncode}")
            time.sleep(0.1)
            progress.update(task, completed=time.monotonic() - start)
        cpu0, wall0, out0 = term.cpu_seconds(), time.monotonic(), term.bytes_out
        while time.monotonic() - wall0 < seconds:
            if term.proc.poll() is not None:
                raise RuntimeError(f"the console exited with {term.proc.returncode}")
            time.sleep(0.1)
            progress.update(task, completed=warmup + time.monotonic() - wall0)
        cpu1, wall1, out1 = term.cpu_seconds(), time.monotonic(), term.bytes_out
        rss = psutil.Process(term.proc.pid).memory_info().rss
    finally:
        term.stop()
    wall = wall1 - wall0
    return {
        "size": f"{size[0]}x{size[1]}", "refresh_per_s": refresh, "seconds": round(wall, 2),
        "cpu_seconds": round(cpu1 - cpu0, 3), "cpu_percent": round(100 * (cpu1 - cpu0) / wall, 2),
        "terminal_bytes_per_s": round((out1 - out0) / wall), "rss_mib": round(rss / 2**20, 1),
    }  # fmt: skip


async def screenshot(socket: Path, path: Path, size: tuple[int, int], seconds: float) -> None:
    """Run the console headless against the busy daemon and save an SVG screenshot."""
    from console.app import ConsoleApp
    from console.client import ControlClient

    client = ControlClient(socket)
    app = ConsoleApp(lambda: client, refresh=4)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(seconds)
        path.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(path.name, str(path.parent))
    await client.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny run (as make test does)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per terminal size")
    parser.add_argument("--cores", type=int, default=160)
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--rate", type=float, default=4.0, help="state updates per second from the daemon")
    parser.add_argument("--decisions", type=float, default=20.0,
                        help="routing decisions per second in the second scenario (0: states only)")
    parser.add_argument("--warmup", type=float, default=30.0,
                        help="seconds before measuring (the log fills to its cap, as on a box running for a while)")
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default bench/results/console.json)")
    parser.add_argument("--svg", type=Path, default=None, help="also save an SVG screenshot under load here")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 2.0
    warmup = 1.5 if args.quick else args.warmup
    sizes = [(80, 24)] if args.quick else [(80, 24), (160, 48)]
    out = args.out or results_dir() / "console.json"

    scenarios = [("states", 0.0)] + ([("+decisions", args.decisions)] if args.decisions > 0 else [])
    if args.quick:
        scenarios = scenarios[-1:]
    runs: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="shcb-", dir="/tmp"))
    try:
        with Progress(console=console, transient=True) as progress:
            for label, decisions in scenarios:
                socket = tmp / f"control-{len(runs)}.sock"
                daemon = start_daemon(socket, args.cores, args.engines, args.rate, decisions)
                try:
                    for size in sizes:
                        run = measure(socket, size, 4.0, warmup, args.seconds, progress)
                        runs.append({"scenario": label, "decisions_per_s": decisions, **run})
                    if args.svg and decisions == scenarios[-1][1]:
                        asyncio.run(screenshot(socket, args.svg, (160, 48), 12.0))
                finally:
                    stop_processes([daemon], grace=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    table = Table(title=f"syshax-console CPU use: {args.cores} cores, {args.engines} engines, "
                        f"{args.rate:g} states/s, {4:g} renders/s")  # fmt: skip
    for column in ("scenario", "decisions/s", "size", "seconds", "CPU s", "CPU %", "KiB/s out", "RSS MiB"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for run in runs:
        ok = run["cpu_percent"] < TARGET_PERCENT
        table.add_row(run["scenario"], f"{run['decisions_per_s']:g}", run["size"], f"{run['seconds']:.0f}",
                      f"{run['cpu_seconds']:.2f}", f"[{'green' if ok else 'red'}]{run['cpu_percent']:.1f}[/]",
                      f"{run['terminal_bytes_per_s'] / 1024:.0f}", f"{run['rss_mib']:.0f}")  # fmt: skip
    console.print(table)
    console.print("CPU % = the console's CPU time / wall time (100 = one core)", style="dim")
    states = [run["cpu_percent"] for run in runs if run["decisions_per_s"] == 0] or [0.0]
    worst = max(run["cpu_percent"] for run in runs)
    verdict = "within" if max(states) < TARGET_PERCENT else "OVER"
    if not args.quick:
        console.print(f"states alone: worst {max(states):.1f}% of one core, {verdict} the "
                      f"{TARGET_PERCENT:g}% target; with decisions: worst {worst:.1f}%")  # fmt: skip
    else:
        console.print(f"worst {worst:.1f}% of one core (quick run: too short to judge)")
    report = {
        "benchmark": "console", "quick": args.quick, "cores": args.cores, "engines": args.engines,
        "state_rate_per_s": args.rate, "target_cpu_percent": TARGET_PERCENT, "runs": runs,
        "states_worst_cpu_percent": max(states), "worst_cpu_percent": worst,
        "within_target": max(states) < TARGET_PERCENT,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
