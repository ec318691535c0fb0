"""``gpu-priority``: strict priority on the GPU alone, the baseline a GPU-only stack offers.

What the Gateway API Inference Extension's flow control or vLLM's
``--scheduling-policy priority`` gives a box without a CPU engine: every request runs on
the GPU; while the GPU is saturated (``classic``'s rules: its batch limit, requests both
running and waiting, or its KV cache past ``gpu_cache_threshold``) requests wait in the
conductor's line, which offers room by class priority (lower first), then arrival. It
never places work on the CPU and knows nothing of targets beyond the order.
"""

from __future__ import annotations

from syshaxd.policy.classic import gpu_full
from syshaxd.policy.common import pick_engine
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import Snapshot


def gpu_priority(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
    """The GPU when it has room; else wait in line, where priority orders the waiting."""
    gpu = pick_engine(snapshot, "gpu")
    full = gpu_full(gpu, limits)
    if gpu is None or full is not None:
        return Decision(None, Mode.WHOLE, None, f"no capacity: {full}; waiting by priority "
                        f"(class {request.level.name!r}, priority {request.level.priority})")
    return Decision("gpu", Mode.WHOLE, None, f"gpu: strict priority, class {request.level.name!r}", engine=gpu.name)
