"""Carrying out a policy's decision: which engines, honouring usability and fit, with fallbacks.

A policy names a device (and perhaps one engine of it) and a mode. The core then picks
the engines: the named engine only while it is usable; else the least loaded usable engine
of the device; among them, those whose KV cache can hold the prompt first (when no engine
can, the request still goes: the engine refuses it with its own message). A device with no
usable engine hands the request to the other device, whole; a split missing either side
runs whole on the side that is there. A request with several choices (``n`` > 1) is never
split: no handoff carries ``n`` sequences from one engine to another (a prefill hands over one
request's KV, a recompute continues one text), so it runs whole on the device that was to
decode it. Every fallback says so in the decision's reason.
"""

from __future__ import annotations

from dataclasses import replace

from syshaxd.core.ticket import Placement
from syshaxd.policy import engine_load
from syshaxd.routing import Decision, Mode, RequestFeatures
from syshaxd.snapshot import Device, EngineView, Snapshot


def other_device(device: Device) -> Device:
    """The device that is not ``device``."""
    return "cpu" if device == "gpu" else "gpu"


def fits(view: EngineView, features: RequestFeatures) -> bool:
    """Whether the engine's KV cache can hold the prompt (unknown capacity: assume it can)."""
    capacity = view.metrics.kv_capacity_tokens
    return capacity is None or capacity <= 0 or features.prompt_tokens < capacity


def pick(snap: Snapshot, device: Device, features: RequestFeatures, preferred: str | None = None) -> EngineView | None:
    """The engine of ``device`` to use: ``preferred`` if usable (and it fits, or none does),
    else the least loaded usable one that fits; None when the device has no usable engine."""
    usable = snap.usable(device)
    if not usable:
        return None
    fitting = [view for view in usable if fits(view, features)] or list(usable)
    if preferred is not None:
        for view in fitting:
            if view.name == preferred:
                return view
    return min(fitting, key=engine_load)


def whole_choices(features: RequestFeatures, decision: Decision) -> Decision:
    """``decision``, or for a split of a request with several choices the same device whole,
    saying why (see the module docstring)."""
    if decision.mode is not Mode.PD_SPLIT or features.n <= 1:
        return decision
    return replace(decision, mode=Mode.WHOLE,
                   reason=f"n={features.n} choices, whole on {decision.device}: a split hands over one sequence, "
                          f"not {features.n}; {decision.reason}")


def place(snap: Snapshot, features: RequestFeatures, decision: Decision) -> Placement | None:
    """The engines for ``decision`` (its device must be set), or None when no engine is usable."""
    decision = whole_choices(features, decision)
    if decision.mode is Mode.PD_SPLIT:
        gpu, cpu = pick(snap, "gpu", features), pick(snap, "cpu", features, decision.engine)
        if gpu is not None and cpu is not None:
            return Placement(decision, (gpu.name, cpu.name))
        alone = cpu or gpu
        if alone is None:
            return None
        missing = "gpu" if gpu is None else "cpu"
        return Placement(replace(decision, device=alone.device, mode=Mode.WHOLE, engine=None,
                                 reason=f"no usable {missing} engine for a split, whole on {alone.device}: "
                                        f"{decision.reason}"), (alone.name,))
    assert decision.device is not None
    view = pick(snap, decision.device, features, decision.engine)
    if view is not None:
        return Placement(decision, (view.name,))
    other = other_device(decision.device)
    view = pick(snap, other, features)
    if view is None:
        return None
    return Placement(replace(decision, device=other, mode=Mode.WHOLE, engine=None,
                             reason=f"{decision.device} unavailable, using {other}: {decision.reason}"),
                     (view.name,))
