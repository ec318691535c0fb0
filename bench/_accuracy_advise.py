"""The accuracy benchmark's third stage: ``syshax advise`` on a window a daemon recorded.

A real syshaxd under ``classic`` in front of two ``tiny`` simulated engines at an eighth of
their speed (decode steps of ~80 ms, wall clock) records the workload of the advise tests;
advise replays it and reports its prediction for the current setting against what
happened: ``current_error`` (TTFT p50, throughput, ...) as relative errors.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bench._traffic import AdviseError, Workload, advise, drive
from demo.procs import Supervisor
from demo.stack import StackOptions, runtime_root, start_stack
from sim.advise.cli import REFUSED
from syshaxd.schema import AdviceModel

#: Seconds ``syshax advise`` may run before it counts as hung.
ADVISE_TIMEOUT = 600.0
#: Each judged error within this.
TOLERANCE = 0.20
#: The errors judged: TTFT p50 and throughput (issue 24's Done-when).
JUDGED = ("ttft_p50", "throughput")
#: The advise tests' window: the GPU's 8 slots overflow at 3/s and the CPU takes a good share.
LOAD = Workload(requests=120, rate=3.0, prompt=(50, 400), max_tokens=(8, 48))
QUICK_LOAD = replace(LOAD, requests=30)
#: The box of tests/advise/test_accuracy.py: the demo's stack with the test stack's settings.
BOX = StackOptions(policy="classic", handoff="recompute", speed=0.125, gpu_profile="tiny", cpu_profile="tiny",
                   monitor_interval=0.2)


@dataclass(frozen=True)
class Recorded:
    """What the daemon served and what advise made of it."""

    ok: int
    failed: int
    advice: AdviceModel


def record_and_advise(load: Workload, done: Callable[[], None] | None = None) -> Recorded:
    """Start the box in a fresh runtime directory, drive ``load``, run advise; stop and remove everything."""
    root = runtime_root()
    sup = Supervisor()
    try:
        stack = start_stack(sup, root, BOX)
        ok = drive(stack.api_url, load, done)
        return Recorded(ok.count(True), ok.count(False), _advice(stack.socket_path))
    finally:
        sup.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def _advice(socket: Path) -> AdviceModel:
    """``syshax advise --json`` on the recorded window; it may take minutes on a busy machine
    (the replay of every option), so only a hung command is cut off.

    A refusal (exit 3: its self-check failed) still prints the advice, with its errors and why.

    Raises:
        AdviseError: the command failed.
    """
    done = advise(socket, "--json", timeout=ADVISE_TIMEOUT)
    if done.returncode not in (0, REFUSED):
        raise AdviseError(f"syshax advise exited with {done.returncode}: {done.stderr.strip()}")
    return AdviceModel.model_validate_json(done.stdout)


def current_row(advice: AdviceModel) -> dict[str, float | None]:
    """The current setting's predicted figures (for the report beside its errors)."""
    current = next((o for o in advice.options if o.current), None)
    if current is None:
        return {}
    return {"ttft_p50": current.ttft_p50, "throughput": current.throughput, "cpu_share": current.cpu_share}
