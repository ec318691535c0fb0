"""The ``syshax-console`` command line: options, errors as messages, then the app or ``--once``.

:func:`main` is the entry point; the Textual app is imported only when the live console starts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console

from console.client import ControlClient, ControlError
from console.keymap import KeymapError, default_keymap_path, load_keymap
from console.locate import SocketChoice, choose_socket
from console.once import print_snapshot
from syshaxd.locate import LocateError
from syshaxd.schema import StateModel


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    parser = argparse.ArgumentParser(
        prog="syshax-console",
        description="Live console of syshaxd: watch both engines, the host and every routing "
        "decision, and change runtime limits while traffic flows.",
    )
    parser.add_argument("--socket", metavar="PATH", help="control socket (default: the config's control.socket, "
                        "else the first that exists of $RUNTIME_DIRECTORY/control.sock, /run/syshax/control.sock, "
                        "$XDG_RUNTIME_DIR/syshax/control.sock or /tmp/syshax-UID/control.sock)")
    parser.add_argument("--config", metavar="PATH", help="syshaxd config file to read control.socket from")
    parser.add_argument("--readonly", action="store_true", help="only watch; never change the daemon")
    parser.add_argument("--refresh", type=float, default=4.0, metavar="HZ",
                        help="screen updates per second, at most (0.5-30, default 4)")
    parser.add_argument("--keymap", metavar="PATH",
                        help=f"key rebinding file (default {default_keymap_path()}, if present)")
    parser.add_argument("--max-log", type=int, default=500, metavar="N",
                        help="decisions kept in the log (default 500)")
    parser.add_argument("--once", action="store_true", help="print one plain-text snapshot and exit (no TUI)")
    parser.add_argument("--screenshot", metavar="PATH", type=Path,
                        help="run without a terminal, save an SVG screenshot after --after seconds, exit")
    parser.add_argument("--after", type=float, default=15.0, metavar="SECONDS",
                        help="with --screenshot: seconds of data to collect first (default 15)")
    parser.add_argument("--size", default="120x40", metavar="COLSxROWS",
                        help="with --screenshot: terminal size (default 120x40)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``syshax-console`` command: parse ``argv`` and run the console; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0.5 <= args.refresh <= 30:
        parser.error(f"--refresh must be between 0.5 and 30 updates per second, not {args.refresh:g}")
    if not 10 <= args.max_log <= 100_000:
        parser.error(f"--max-log must be between 10 and 100000, not {args.max_log}")
    try:
        choice = choose_socket(args.socket, args.config)
    except LocateError as exc:
        parser.exit(2, f"syshax-console: error: {exc}\n")
    if args.once:
        return _once(choice)
    size = _size(parser, args.size)
    if args.screenshot is not None and not args.screenshot.parent.is_dir():
        parser.error(f"--screenshot: directory {args.screenshot.parent} does not exist")
    if not 0 <= args.after <= 3600:
        parser.error(f"--after must be between 0 and 3600 seconds, not {args.after:g}")
    from console.app import ConsoleApp  # Textual is only needed for the live console

    try:
        keymap = _keymap(args.keymap, ConsoleApp.binding_ids())
    except KeymapError as exc:
        parser.exit(2, f"syshax-console: error: {exc}\n")
    app = ConsoleApp(
        ClientPool(choice).client,
        refresh=args.refresh,
        readonly=args.readonly,
        keymap=keymap,
        max_log=args.max_log,
        screenshot=(args.screenshot, args.after) if args.screenshot else None,
    )
    if args.screenshot:
        app.run(headless=True, size=size)
        print(f"saved {args.screenshot}")
    else:
        app.run()
    return 0


def _size(parser: argparse.ArgumentParser, text: str) -> tuple[int, int]:
    cols, sep, rows = text.lower().partition("x")
    if not (sep and cols.isdigit() and rows.isdigit() and 40 <= int(cols) <= 500 and 10 <= int(rows) <= 300):
        parser.error(f"--size must look like 120x40 (40-500 columns, 10-300 rows), not {text!r}")
    return int(cols), int(rows)


class ClientPool:
    """Makes the client for each connection attempt: the same one unless the socket moved."""

    def __init__(self, choice: SocketChoice) -> None:
        """Clients for the socket ``choice`` resolves to."""
        self.choice = choice
        self._current: ControlClient | None = None

    def client(self) -> ControlClient:
        """The client for the socket to try now."""
        path = self.choice.resolve()
        if self._current is None or self._current.socket_path != path:
            self._current = ControlClient(path)
        return self._current


def _keymap(explicit: str | None, ids: list[str]) -> dict[str, str]:
    if explicit:
        return load_keymap(Path(explicit), ids, required=True)
    return load_keymap(default_keymap_path(), ids, required=False)


def _once(choice: SocketChoice) -> int:
    path = choice.resolve()
    console = Console()

    async def fetch() -> StateModel:
        client = ControlClient(path)
        try:
            return await client.state()
        finally:
            await client.aclose()

    try:
        state = asyncio.run(fetch())
    except ControlError as exc:
        print(f"syshax-console: {exc}", file=sys.stderr)
        return 1
    print_snapshot(state, console, str(path))
    return 0
