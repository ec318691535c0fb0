"""The ``syshax`` command line: one module per command group, registered below.

Exit codes: 0 ok, 2 usage or configuration error, 1 anything else.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from syshaxd.cli import _common, configcmds
from syshaxd.config import ConfigError

#: Command-group modules; each has ``register(subparsers)`` that sets ``func`` on its parsers.
COMMAND_MODULES: list[ModuleType] = [configcmds]


def _optional_modules() -> list[ModuleType]:
    """Command groups that live in other parts of the package (added as they land)."""
    found = []
    for name in _common.OPTIONAL_COMMANDS:
        try:
            found.append(importlib.import_module(f"syshaxd.cli.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"syshaxd.cli.{name}":
                raise
    return found


def build_parser() -> _common.Parser:
    """The full argument parser."""
    parser = _common.Parser(
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
    for module in [*COMMAND_MODULES, *_optional_modules()]:
        module.register(sub)
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
    except (ConfigError, _common.UsageError) as exc:
        print(f"syshax: {exc}", file=sys.stderr)
        return 2
    except _common.CommandError as exc:
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
