"""When ``adaptive`` holds a request back from the GPU: the running batch's TPOT and the KV cache.

A GPU engine takes every request it is sent: what it cannot start waits inside it, and
what it starts slows every answer already decoding. :func:`gpu_hold` admits one more only
while all of these hold (an idle engine always admits: a request alone breaks no target):

- **Nothing queues inside.** There nothing can reorder a request or send it elsewhere.
- **KV headroom.** The cache's tokens, the prompts on their way and this one stay under
  ``Tuning.kv_guard`` of the capacity the engine reports (past it vLLM queues or preempts).
  Where the capacity is unknown, ``classic``'s usage threshold (``gpu_cache_threshold``)
  stands in instead.
- **Growth until an answer ends.** Until the first running answer ends (judged from each
  answer's age and max_tokens) every request in the batch writes a token per step. A
  prompt whose prefill takes longer than ``Tuning.long_prompt_s`` waits while that growth
  would overflow the cache: vLLM would preempt it, the newest, and recompute it again and
  again, stalling the batch each time. A short prompt's recompute is a stall it absorbs.
- **TPOT.** The batch's projected time per output token, ``tpot(B + 1)`` plus the prefill
  of the prompts on their way and this one spread over the tokens the running answers
  still write, stays under ``Tuning.tpot_guard`` of the tightest TPOT target among the
  batch's requests and this one (:func:`batch_tpot_target`).

A request already past its TTFT target gets the GPU only where it has slack
(:func:`gpu_slack`). The runs that set the thresholds: docs/benchmarks.md, "Why adaptive
holds where it does".
"""

from __future__ import annotations

from syshaxd.policy.common import busy
from syshaxd.policy.estimates import DEFAULT_TUNING, DeviceModel, Tuning, remaining_tokens
from syshaxd.routing import Limits
from syshaxd.snapshot import EngineView


def projected_tpot(gpu: EngineView, model: DeviceModel, prompt: int, tuning: Tuning = DEFAULT_TUNING) -> float:
    """Time per output token of the running batch once ``prompt`` is admitted, interference included."""
    load = busy(gpu)
    prompts = gpu.scheduled_prompt_tokens + prompt
    remaining = max(1.0, remaining_tokens(gpu, tuning) / 2)
    return model.tpot(load + 1) + model.prefill(prompts) / remaining


def kv_need(gpu: EngineView, prompt: int) -> tuple[float, int] | None:
    """KV tokens the engine holds once the request's prompt is in, and its capacity; None when unknown."""
    capacity = gpu.metrics.kv_capacity_tokens
    if capacity is None or capacity <= 0:
        return None
    used = (gpu.metrics.kv_cache_usage or 0.0) * capacity
    return used + gpu.scheduled_prompt_tokens + prompt, capacity


def growth_until_first_end(gpu: EngineView, model: DeviceModel) -> float | None:
    """KV tokens the batch writes before its first answer ends (by max_tokens); None when none has started.

    Each started answer has written about its age over the batch's TPOT; the one with the
    fewest tokens left ends first, and until then every request in the batch, and the one
    about to join it, adds a token per step.
    """
    if not gpu.answers:
        return None
    load = busy(gpu)
    tpot = model.tpot(max(1, load))
    soonest = min(most - age / tpot for age, most in gpu.answers)
    return max(0.0, soonest) * (load + 1)


def gpu_hold(
    gpu: EngineView, model: DeviceModel, prompt: int, limits: Limits, tuning: Tuning = DEFAULT_TUNING,
    *, decode: bool = True, urgent: bool = False,
) -> str | None:
    """Why the GPU must not take the request now, or None when it may.

    Args:
        decode: False for a pd_split's prefill, which leaves the GPU after its first
            tokens: it neither joins the decode batch nor grows in the KV cache, so only
            its prompt must fit (``gpu_cache_threshold`` is about growth and does not apply).
    """
    if busy(gpu) == 0 and gpu.running == 0:
        return None
    if gpu.waiting > 0:
        return f"gpu engine already queues {gpu.waiting}"
    need = kv_need(gpu, prompt)
    kv = gpu.metrics.kv_cache_usage
    if need is not None:
        tokens, capacity = need
        if tokens > capacity * tuning.kv_guard:
            return f"gpu KV cache would need {tokens:.0f} of {capacity} tokens"
        stall = model.prefill(prompt)  # a short prompt never waits here: skip the batch's answers
        growth = growth_until_first_end(gpu, model) if decode and stall > tuning.long_prompt_s else None
        if growth is not None and tokens + growth > capacity:
            return (f"the batch would outgrow the gpu KV cache ({tokens:.0f} + {growth:.0f} of {capacity} tokens) "
                    f"before an answer ends, and this prompt's recompute stalls it {stall * 1000:.0f}ms")
    elif decode and kv is not None and kv * 100.0 >= limits.gpu_cache_threshold:
        return f"gpu KV cache {kv * 100.0:.1f}% >= {limits.gpu_cache_threshold:g}%"
    tpot = projected_tpot(gpu, model, prompt, tuning)
    if not decode:
        tpot -= model.tpot(busy(gpu) + 1) - model.tpot(max(1, busy(gpu)))
    if tpot > batch_tpot_target(gpu, limits) * (1.0 if urgent else tuning.tpot_guard):
        return f"running batch would decode at {tpot * 1000:.0f}ms per token"
    return None


def batch_tpot_target(engine: EngineView, limits: Limits) -> float:
    """The TPOT the engine's running batch must keep: the tightest among its requests' targets
    and the newcomer's (``limits`` are the request's own)."""
    tightest = engine.tightest_tpot
    return limits.tpot_target if tightest is None else min(tightest, limits.tpot_target)


def gpu_slack(
    gpu: EngineView, model: DeviceModel, prompt: int, out: int, limits: Limits, tuning: Tuning = DEFAULT_TUNING
) -> str | None:
    """Why the GPU has no slack for a request that is already late, or None when it has.

    Slack: the whole answer fits the KV cache beside every in-flight request's whole
    answer below ``kv_pressure`` (past that line the room is kept for requests still on
    time), and the batch's projected TPOT stays under half the target. A late request then
    costs the requests still on time nothing they would notice.
    """
    capacity = gpu.metrics.kv_capacity_tokens
    if capacity:
        used = (gpu.metrics.kv_cache_usage or 0.0) * capacity
        tokens = used + gpu.scheduled_prompt_tokens + gpu.inflight_decode_tokens / 2 + prompt + out
        if tokens > capacity * min(tuning.kv_pressure, tuning.kv_guard):
            return f"a whole answer would need {tokens:.0f} of {capacity} KV tokens"
    tpot = projected_tpot(gpu, model, prompt, tuning)
    if tpot > batch_tpot_target(gpu, limits) / 2:
        return f"the batch would decode at {tpot * 1000:.0f}ms per token"
    return None
