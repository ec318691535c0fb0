"""The advise tests' traffic and ``syshax advise`` calls, on a test stack (the driver is bench/_traffic.py)."""

from __future__ import annotations

import subprocess

from bench import _traffic
from bench._accuracy_advise import ADVISE_TIMEOUT
from bench._traffic import Workload
from syshaxd.schema import AdviceModel
from tests.plugins.stack import Stack

__all__ = ["Workload", "advice_of", "advise", "drive"]


def drive(stack: Stack, load: Workload) -> list[bool]:
    """Send the workload through the stack's daemon open loop; whether each request succeeded."""
    return _traffic.drive(stack.url, load)


def advise(stack: Stack, *args: str, timeout: float = ADVISE_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``syshax advise`` against the stack's control socket."""
    return _traffic.advise(stack.tmp / "run" / "control.sock", *args, timeout=timeout)


def advice_of(stack: Stack, *args: str) -> AdviceModel:
    """``syshax advise --json``: the advice it printed (it must succeed)."""
    done = advise(stack, "--json", *args)
    assert done.returncode == 0, f"syshax advise exited with {done.returncode}: {done.stderr.strip()}"
    return AdviceModel.model_validate_json(done.stdout)
