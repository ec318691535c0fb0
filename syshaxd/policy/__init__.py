"""Scheduling policies: pure functions ``(Snapshot, RequestFeatures, Limits) -> Decision``.

The types they take and give are the routing vocabulary (:mod:`syshaxd.routing`).
``get_policy(name)`` builds the policy for a config name (``syshaxd.config.PolicyName``).
``pick_engine``, ``engine_load`` and ``cpu_token_limit`` are shared with the scheduling
core, and so is each policy's queue order (``queue_order``). Every policy it gives keeps the
classes whose ``cpu`` is false off the CPU (:mod:`syshaxd.policy.cpu_classes`).
"""

from __future__ import annotations

from syshaxd.policy.adaptive import adaptive
from syshaxd.policy.baselines import RoundRobin, cpu_only, gpu_only
from syshaxd.policy.classic import classic
from syshaxd.policy.common import cpu_token_limit, engine_load, pick_engine
from syshaxd.policy.cpu_classes import keep_off_cpu
from syshaxd.policy.estimates import solo_tpot
from syshaxd.policy.priority import gpu_priority
from syshaxd.policy.queueing import QueueOrder, queue_order
from syshaxd.routing import Policy

POLICY_NAMES: tuple[str, ...] = ("classic", "adaptive", "gpu-only", "cpu-only", "round-robin", "gpu-priority")


def get_policy(name: str) -> Policy:
    """The policy of a config name, keeping the classes whose ``cpu`` is false off the CPU;
    ``round-robin`` gets a fresh instance (it keeps a turn). The function it wraps is its
    ``__wrapped__``.

    Raises:
        KeyError: unknown name, with the known names in the message.
    """
    fixed: dict[str, Policy] = {"classic": classic, "adaptive": adaptive, "gpu-only": gpu_only, "cpu-only": cpu_only,
                                "gpu-priority": gpu_priority}
    if name == "round-robin":
        return keep_off_cpu(RoundRobin())
    try:
        return keep_off_cpu(fixed[name])
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}") from None


__all__ = [
    "solo_tpot",
    "POLICY_NAMES", "QueueOrder", "RoundRobin", "adaptive", "classic", "cpu_only", "cpu_token_limit", "engine_load",
    "get_policy", "gpu_only", "gpu_priority", "pick_engine", "queue_order",
]  # fmt: skip
