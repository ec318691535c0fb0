"""When ``adaptive`` holds a request back from the GPU: the running batch's TPOT and the KV cache.

A GPU engine takes every request it is sent; what it cannot start waits inside it, and
what it starts slows down everything already decoding. Two things break the targets of
requests that are already running, and this module estimates both before one more is
admitted:

- **TPOT.** Each decode step of a batch of B takes ``tpot(B)``; every prompt prefilled
  while they decode (vLLM chunks it into the same steps) adds its prefill time to each
  running request's total. Spread over the tokens a running request still writes, the
  new request's prompt, and those routed before it that have not started, add
  ``prefill(prompts) / remaining`` to each running request's time per output token. The
  projection is ``tpot(B + 1) + prefill(prompts) / remaining``; ``tpot`` is the live
  model (:mod:`syshaxd.policy.estimates`), measured with the interference of recent
  prefills in it. Over ``tpot_guard`` of the target, the request waits.
- **KV headroom.** When the tokens in the cache, the prompts on their way and this prompt
  would pass ``kv_guard`` of the cache (its capacity in tokens, reported by the engine),
  the request waits: vLLM would queue it, or preempt a running request and recompute it,
  which costs that request its TPOT. Where the capacity is unknown the estimate is
  unsure, and ``classic``'s rule stands in: no request while the KV usage is past
  ``gpu_cache_threshold`` percent. No share of the cache is reserved for the running
  answers' growth, and with a known capacity the usage threshold does not apply: replayed
  on reasoning-length answers, both held back requests the engine would have served in
  time (running answers end at different moments) and cost more TTFT than the
  preemptions they saved.
  For the same reason the guard sits at 98%: at 95% a 40 GB card's last 1,100 tokens of
  room went unused while an on-time prompt waited into lateness. The 2% left there is
  ~450 tokens, about two seconds of a ten-answer batch's growth, so under a full batch
  vLLM may preempt a running answer; a short prompt's recompute is a stall the batch
  absorbs, and its first token came in time.
- **Growth until an answer ends.** Room comes back only when a running answer ends. The
  conductor knows each started answer's age and max_tokens, so about when the first one
  will; until then every request in the batch, the new one too, writes a token per step.
  When that growth would overflow the cache, vLLM preempts the newest request, this one,
  and brings it back chunk by chunk while the batch still grows, to preempt it again. A
  prompt whose prefill takes longer than ``long_prompt_s`` (0.2 s, under a 2,048-token
  chunk on these GPUs) then stalls every running answer at each recompute, so it waits
  for room instead (replayed on reasoning answers
  on a 40 GB card, a 6,472-token prompt admitted at 94% of the cache was preempted 496
  times, the 4,113-token one after it 267, while the requests behind them waited minutes;
  with this rule the run counts 4 preemptions, not 948). A fixed reserve for the
  batch's next seconds of growth, tried instead, held short prompts too and lost more
  than it saved. Live, max_tokens is an upper bound: the rule errs towards waiting.

An engine that already queues requests inside takes no more (they could only wait there,
where nothing can reorder them or send them elsewhere). An idle engine always admits: a
request alone cannot break anyone's target, and holding it would only add waiting.
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
    answer below ``kv_pressure`` (past that line the GPU's room is kept for requests still
    on time: replayed on reasoning answers, late work admitted up to ``kv_guard`` held
    back the on-time arrivals after it), and the batch's projected TPOT stays under half
    the target. A late request then costs the requests still on time nothing they would
    notice.
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
