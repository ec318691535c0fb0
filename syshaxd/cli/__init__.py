"""The ``syshax`` command line: one module per command group, registered below.

The daemon's own groups live here (config, control, numa). Other packages add theirs through
the ``syshax.commands`` entry point group (``syshax sim`` from :mod:`sim.cli`, ``syshax demo``
from :mod:`demo.cli`): the daemon never imports the simulator or the demo.

Exit codes: 0 ok, 2 usage or configuration error, 1 anything else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any

from syshaxd.cli import configcmds, control, numa
from syshaxd.cli._common import CommandError, Parser, UsageError
from syshaxd.config import ConfigError

__all__ = ["CommandError", "Parser", "UsageError", "build_parser", "main"]

#: The entry point group other packages register their command groups in.
ENTRY_POINTS = "syshax.commands"
Register = Callable[[Any], None]
#: The daemon's own command groups; each has ``register(subparsers)`` that sets ``func``.
OWN: list[Register] = [configcmds.register, control.register, numa.register]


def _plugged_in() -> list[Register]:
    """``register`` of every command group installed under :data:`ENTRY_POINTS`, by name."""
    return [ep.load() for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda ep: ep.name)]


def build_parser() -> Parser:
    """The full argument parser."""
    parser = Parser(
        prog="syshax",
        description="syshax: one OpenAI endpoint in front of a GPU and a CPU inference engine.",
        epilog="Exit codes: 0 ok, 2 usage or configuration error, 1 anything else.",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="config file (else $SYSHAX_CONFIG, /etc/syshax/config.yaml, ./config/config.yaml)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in [*OWN, *_plugged_in()]:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``syshax``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except (ConfigError, UsageError) as exc:
        print(f"syshax: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"syshax: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # A file the command needed could not be written or read (permissions, disk full).
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"syshax: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
