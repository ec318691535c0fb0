"""One benchmark run: a policy on a hardware scenario over a list of requests, in virtual time.

The virtual-time conductor is ``bench/_vtime.py`` (see its docstring for what it models).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench._measure import Outcome
from bench._scenarios import limits
from bench._vtime import Conductor
from bench._workloads import Request
from syshaxd.config import Handoff
from syshaxd.policy import get_policy
from syshaxd.sim.profile import load_profile


@dataclass(frozen=True)
class RunSpec:
    """What one run replays against: engines (None = absent), policy, targets, handoff."""

    gpu_profile: str | None
    cpu_profile: str | None
    policy: str
    ttft_target: float
    tpot_target: float
    handoff: Handoff


@dataclass(frozen=True)
class RunResult:
    """Per-request outcomes, engine busy seconds per device and decision counts."""

    outcomes: list[Outcome]
    gpu_busy: float
    cpu_busy: float
    decisions: dict[str, int]


def execute(spec: RunSpec, requests: Sequence[Request]) -> RunResult:
    """Replay ``requests`` through the policy and the simulated engines of ``spec``."""
    gpu = load_profile(spec.gpu_profile) if spec.gpu_profile else None
    cpu = load_profile(spec.cpu_profile) if spec.cpu_profile else None
    conductor = Conductor(gpu, cpu, get_policy(spec.policy), limits(spec.ttft_target, spec.tpot_target, spec.handoff))
    result = conductor.run(requests)
    return RunResult(result.outcomes, result.busy["gpu"], result.busy["cpu"], result.decisions)
