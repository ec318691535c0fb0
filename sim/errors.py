"""The simulator command line's errors: a user's mistake or a job that could not be done.

They are raised wherever a command finds the problem and rendered once, at the edge:
``python -m sim`` prints them (:mod:`sim.command`), ``syshax sim`` maps them to its own
(:mod:`sim.cli`).
"""

from __future__ import annotations


class UsageError(Exception):
    """The command line is wrong (exit 2)."""


class CommandError(Exception):
    """The command could not do its job (exit 1)."""
