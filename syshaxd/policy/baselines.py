"""Baseline policies for benchmarks: ``gpu-only``, ``cpu-only`` and ``round-robin``.

They ignore load (the engines queue what they cannot run) so that benchmarks compare the
real policies against plain strategies.
"""

from __future__ import annotations

import itertools

from syshaxd.policy.common import pick_engine
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import Device, Snapshot


def _on(snapshot: Snapshot, device: Device, reason: str) -> Decision:
    engine = pick_engine(snapshot, device)
    if engine is None:
        return Decision(None, Mode.WHOLE, None, f"no capacity: no usable {device.upper()} engine")
    return Decision(device, Mode.WHOLE, None, reason, engine=engine.name)


def gpu_only(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
    """Everything on the GPU."""
    return _on(snapshot, "gpu", "gpu: gpu-only policy")


def cpu_only(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
    """Everything on the CPU."""
    return _on(snapshot, "cpu", "cpu: cpu-only policy")


class RoundRobin:
    """Alternate GPU and CPU, request by request; an instance keeps its own turn.

    A device without a usable engine is skipped. Keep one instance per conductor (or per
    benchmark run): ``get_policy("round-robin")`` returns a new one each call.
    """

    def __init__(self) -> None:
        self._turn = itertools.count()

    def __call__(self, snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
        """Route to the device whose turn it is (or the other one if it has no usable engine)."""
        first: Device = "gpu" if next(self._turn) % 2 == 0 else "cpu"
        second: Device = "cpu" if first == "gpu" else "gpu"
        for device in (first, second):
            if pick_engine(snapshot, device) is not None:
                note = "its turn" if device == first else f"{first} has no usable engine"
                return _on(snapshot, device, f"{device}: round-robin, {note}")
        return Decision(None, Mode.WHOLE, None, "no capacity: no usable engine")
