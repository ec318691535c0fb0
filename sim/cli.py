"""``syshax sim``: run simulated engines (one, or a GPU + CPU pair), list profiles, replay traces.

The options and commands live in :mod:`sim.command` (shared with
``python -m sim``); this module registers them and maps their errors to the
CLI's exit codes.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable

from sim import command, errors
from syshaxd.cli import CommandError, UsageError

Command = Callable[[argparse.Namespace], int]


def _translate(func: Command) -> Command:
    @functools.wraps(func)
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except errors.UsageError as exc:
            raise UsageError(str(exc)) from None
        except errors.CommandError as exc:
            raise CommandError(str(exc)) from None

    return run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``syshax sim``."""
    p = sub.add_parser(
        "sim",
        help="run simulated inference engines (no GPU or model needed)",
        description="Run an engine simulator that speaks vLLM's OpenAI API and a chosen /metrics dialect, "
        "with timing from a calibrated device profile.",
    )
    command.add_arguments(p, wrap=_translate)
