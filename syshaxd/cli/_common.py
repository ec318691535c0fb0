"""Shared pieces of the CLI: errors and config loading."""

from __future__ import annotations

import argparse

from syshaxd.config import LoadedConfig, load_config

#: Command-group modules under syshaxd/cli/ that register themselves when present.
OPTIONAL_COMMANDS = ["sim", "control", "numa", "demo", "engines"]


class UsageError(Exception):
    """The command line is wrong (exit 2)."""


class CommandError(Exception):
    """The command could not do its job (exit 1)."""


def load(args: argparse.Namespace, *, use_overrides: bool = True) -> LoadedConfig:
    """Load the config named by ``--config`` (or the lookup order)."""
    return load_config(getattr(args, "config", None), use_overrides=use_overrides)


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    """Accept ``--config PATH`` after the subcommand too."""
    parser.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="config file to use")
