"""``gpu-priority``: strict priority on the GPU alone, the baseline a GPU-only stack offers.

What the Gateway API Inference Extension's flow control or vLLM's
``--scheduling-policy priority`` gives a box without a CPU engine: every request runs on
the GPU; while the GPU is saturated, as GAIE's saturation detector judges it (the engine
queues requests of its own, or its KV cache would pass ``gpu_cache_threshold`` with the
prompts on their way and this one), requests wait in the conductor's line, which offers
room by class priority (lower first), then arrival. No batch limit of ours: the engine
batches as it can, as it would behind a gateway. It never places work on the CPU and knows
nothing of targets beyond the order.
"""

from __future__ import annotations

from syshaxd.policy.common import busy, pick_engine
from syshaxd.policy.holding import kv_need
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineView, Snapshot


def saturated(gpu: EngineView | None, prompt: int, limits: Limits) -> str | None:
    """Why the GPU is saturated for a prompt of ``prompt`` tokens, or None when it takes it."""
    if gpu is None:
        return "no usable GPU engine"
    if gpu.waiting > 0 and busy(gpu) > 0:
        return f"gpu engine queues {gpu.waiting}"
    need = kv_need(gpu, prompt)
    threshold = limits.gpu_cache_threshold / 100.0
    if need is not None and busy(gpu) > 0 and need[0] > need[1] * threshold:
        return f"gpu KV cache would hold {need[0]:.0f} of {need[1]} tokens (> {limits.gpu_cache_threshold:g}%)"
    kv = gpu.metrics.kv_cache_usage
    if need is None and kv is not None and kv >= threshold:
        return f"gpu KV cache {kv * 100.0:.1f}% >= {limits.gpu_cache_threshold:g}%"
    return None


def gpu_priority(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
    """The GPU when it is not saturated; else wait in line, where priority orders the waiting."""
    gpu = pick_engine(snapshot, "gpu")
    full = saturated(gpu, request.prompt_tokens, limits)
    if gpu is None or full is not None:
        return Decision(None, Mode.WHOLE, None, f"no capacity: {full}; waiting by priority "
                        f"(class {request.level.name!r}, priority {request.level.priority})")
    return Decision("gpu", Mode.WHOLE, None, f"gpu: strict priority, class {request.level.name!r}", engine=gpu.name)
