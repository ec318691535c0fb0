"""Hardware scenarios and policy settings of the scheduling benchmark."""

from __future__ import annotations

from dataclasses import dataclass, replace

from syshaxd.config import Decider, Handoff, limits_of
from syshaxd.routing import Limits


@dataclass(frozen=True)
class Scenario:
    """One box: a GPU engine and a CPU engine serving the same model."""

    name: str
    gpu_profile: str
    cpu_profile: str
    summary: str


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("a100-80g+q4", "gpu-a100", "cpu-kunpeng920-q4", "2 x A100 80 GB (TP2) + 2 x Kunpeng 920, q4_0"),
        Scenario("a100-80g+q8", "gpu-a100", "cpu-kunpeng920-q8", "2 x A100 80 GB (TP2) + 2 x Kunpeng 920, q8_0"),
        Scenario("a100-40g+q4", "gpu-a100-40g", "cpu-kunpeng920-q4", "2 x A100 40 GB (TP2, KV-starved) + Kunpeng 920, q4_0"),
        Scenario("a100-40g+q8", "gpu-a100-40g", "cpu-kunpeng920-q8", "2 x A100 40 GB (TP2, KV-starved) + Kunpeng 920, q8_0"),
        Scenario("l4-moe+xeon", "gpu-l4-qwen3moe", "cpu-xeon-amx-qwen3moe",
                 "Qwen3-30B-A3B (MoE, 3.3B active): 1 x L4 24 GB (AWQ) + 1 Xeon 8480+ socket (AMX, Q4_K_M)"),
        Scenario("a100-40g-14b+xeon", "gpu-a100-40g-14b", "cpu-xeon-amx-14b",
                 "R1-Distill-Qwen-14B (dense): 1 x A100 40 GB (bf16, KV-starved) + 1 Xeon 8480+ socket (AMX, Q4_K_M)"),
    )
}
#: The policies compared; ``cpu-only`` runs only to measure the CPU alone for the ceiling.
POLICIES: tuple[str, ...] = ("gpu-only", "gpu-held", "round-robin", "classic", "adaptive")
#: The policies that run on the GPU engine alone (the box's CPU switched off), and the
#: policy function each runs: ``gpu-held`` is ``adaptive``'s admission (holding back, the
#: deadline queue) with no CPU to send work to, a baseline a GPU-only deployment can run;
#: ``gpu-priority`` is strict priority on the GPU (the mixed-traffic baseline).
GPU_ALONE: dict[str, str] = {"gpu-only": "gpu-only", "gpu-held": "adaptive", "gpu-priority": "gpu-priority"}
#: Offered rates of the sweep, as multiples of the GPU-only capacity.
SWEEP: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
QUICK_SWEEP: tuple[float, ...] = (0.5, 1.0, 2.0)


def policy_function(name: str) -> str:
    """The policy function a benchmark policy runs (``gpu-held`` runs ``adaptive``)."""
    return GPU_ALONE.get(name, name)


def uses_cpu(name: str) -> bool:
    """Whether a benchmark policy runs with the box's CPU engine."""
    return name not in GPU_ALONE


def limits(ttft_target: float, tpot_target: float, handoff: Handoff) -> Limits:
    """The decider's shipped defaults (what a user gets), with the benchmark's targets."""
    base = limits_of(Decider(), handoff)
    return replace(base, ttft_target=ttft_target, tpot_target=tpot_target)


def pick(names: str | None, known: dict[str, Scenario] | tuple[str, ...], what: str) -> list[str]:
    """A comma-separated choice checked against the known names (None = all)."""
    allowed = list(known)
    if not names:
        return allowed
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in allowed]
    if unknown or not chosen:
        raise ValueError(f"unknown {what} {', '.join(unknown) or repr(names)}; choose from {', '.join(allowed)}")
    return chosen
