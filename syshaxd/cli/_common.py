"""Shared pieces of the CLI: the parser class, errors, and config loading."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

from syshaxd import config as cfg
from syshaxd.locate import CONFIG_ENV, CONFIG_LOCATIONS


class UsageError(Exception):
    """The command line is wrong (exit 2)."""


class CommandError(Exception):
    """The command could not do its job (exit 1)."""


class Parser(argparse.ArgumentParser):
    """argparse with a "did you mean" for a mistyped command; usage errors exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print usage and a clear message to stderr, then exit 2."""
        found = re.search(r"invalid choice: '([^']*)'", message)
        commands = self._command_names()
        if found and commands:
            word = found.group(1)
            hint = cfg.suggest(word, commands)
            message = f"unknown command {word!r}" + (f" (did you mean {hint!r}?)" if hint else "")
            message += f"; commands: {', '.join(commands)}"
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _command_names(self) -> list[str]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return list(action.choices)
        return []


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    """Accept ``--config PATH`` after the subcommand too."""
    parser.add_argument(
        "--config", metavar="PATH", default=argparse.SUPPRESS, help="config file to use"
    )


def load(args: argparse.Namespace, *, use_overrides: bool = True) -> cfg.LoadedConfig:
    """Load the layered config named by ``--config`` (or the lookup order)."""
    return cfg.load_config(getattr(args, "config", None), use_overrides=use_overrides)


def load_file_only(args: argparse.Namespace) -> cfg.LoadedConfig:
    """Defaults plus the config file, without the overrides file or environment overrides."""
    env = {CONFIG_ENV: os.environ[CONFIG_ENV]} if os.environ.get(CONFIG_ENV) else {}
    return cfg.load_config(getattr(args, "config", None), env=env, use_overrides=False)


def target_path(args: argparse.Namespace) -> Path:
    """The file ``init`` and ``config`` write: ``--config``, ``$SYSHAX_CONFIG``, the first
    existing default location, else the last default location (./config/config.yaml)."""
    explicit = getattr(args, "config", None) or os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    found = cfg.find_config_path(None, {})
    return found if found is not None else CONFIG_LOCATIONS[-1]
