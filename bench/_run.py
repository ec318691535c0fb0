"""One benchmark run: a policy on a hardware scenario over a list of requests, in virtual time.

The run itself is the simulator's virtual-time conductor (:mod:`sim.runner`):
conductor-faithful snapshots (scrapes every ``monitor.interval``, the monitor's rate
tracker, live in-flight counts), the bounded admission queue, request timeouts, the
pd_split handoffs and the CPU token-limit re-asks, all with the config's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench._measure import Outcome
from bench._scenarios import limits
from bench._workloads import Request
from sim.profile import load_profile
from sim.runner import EngineSpec, RunOptions, run
from sim.traces import TraceRequest
from syshaxd.config import Handoff


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
    gpu_preemptions: int


def execute(spec: RunSpec, requests: Sequence[Request]) -> RunResult:
    """Replay ``requests`` through the policy and the simulated engines of ``spec``."""
    engines = []
    if spec.gpu_profile:
        engines.append(EngineSpec("gpu0", "gpu", load_profile(spec.gpu_profile)))
    if spec.cpu_profile:
        engines.append(EngineSpec("cpu0", "cpu", load_profile(spec.cpu_profile)))
    trace = [TraceRequest(r.arrival, r.prompt_tokens, r.output_tokens, r.prefix, level=r.level) for r in requests]
    result = run(trace, engines, spec.policy, limits(spec.ttft_target, spec.tpot_target, spec.handoff),
                 RunOptions(handoff=spec.handoff))
    outcomes = [
        Outcome(arrival=r.arrival, prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens, ttft=r.ttft,
                e2e=r.e2e if r.outcome == "ok" else None, cpu_tokens=r.cpu_tokens, route=r.route,
                outcome=r.outcome, level=r.level, met=r.met, refusal=r.refusal)
        for r in sorted(result.requests, key=lambda r: r.index)
    ]
    s = result.summary
    busy = {d: v.utilisation * v.engines * s.makespan for d, v in s.devices.items()}
    gpu = s.devices.get("gpu")
    return RunResult(outcomes, busy.get("gpu", 0.0), busy.get("cpu", 0.0), dict(result.decisions),
                     gpu.preemptions if gpu is not None else 0)
