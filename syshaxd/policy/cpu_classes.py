"""Classes kept off the CPU (``service.classes.<name>.cpu: false``): their policy sees no CPU engine.

Every policy a name gives (:func:`syshaxd.policy.get_policy`) is wrapped here, so the rule holds
whatever the policy: a request whose class may not use the CPU is decided on the snapshot
without the CPU engines, so the policy places it on the GPU or holds it until the GPU has
room, as it would on a box without a CPU engine, and the reason says the class is kept off
the CPU. A continuation already on the CPU (``num_decode_tokens``) and a forced split
(``/v1/chat/pd_disagg``) are what the client asked for and pass through unchanged. The core's
fallbacks when an engine fails (no usable GPU engine at placement, a resubmit) are not
placements by class and may still use the CPU.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from syshaxd.routing import Decision, Limits, Policy, RequestFeatures
from syshaxd.snapshot import Snapshot

__all__ = ["gpu_only_view", "keep_off_cpu"]


def gpu_only_view(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` without its CPU engines."""
    return replace(snapshot, engines=tuple(e for e in snapshot.engines if e.device != "cpu"))


def keep_off_cpu(policy: Policy) -> Policy:
    """``policy``, deciding a request whose class has ``cpu`` False as if the box had no CPU engine."""

    def gated(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
        if request.level.cpu or request.has_num_decode_tokens or request.forced_mode is not None:
            return policy(snapshot, request, limits)
        decision = policy(gpu_only_view(snapshot), request, limits)
        return replace(decision, reason=f"{decision.reason} (class {request.level.name!r} is kept off the cpu)")

    return functools.update_wrapper(gated, policy)
