"""Roofline step time: how long one engine iteration takes for a given batch.

An iteration runs every scheduled sequence's new tokens through the model once. Its
time is the larger of the compute time (linear layers ~2 x parameters FLOPs per token,
plus attention) and the memory time (all weights once, plus the KV cache the batch
reads), plus tensor-parallel all-reduces and a fixed per-step and per-sequence overhead
(scheduling, sampling, detokenising). Prefill is compute-bound, decode memory-bound; the
formulas and constants are in ``docs/simulator.md`` and the profile files.

A mixture-of-experts model computes with its active parameters only
(``linear_flops_per_token``), and a step reads the dense weights plus the routed experts
its tokens touch: with E experts and top-k routing, n tokens leave an expert untouched
with probability (1 - k/E)^n, so one decoding request reads about k/E of the experts and a
large prefill all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.profile import Profile

ALLREDUCES_PER_LAYER = 2  # one after attention, one after the MLP (Megatron-style TP)
ACTIVATION_BYTES = 2  # fp16 activations are what the all-reduce moves


def _compute(p: Profile, tokens: float, attn: float) -> float:
    flops = p.linear_flops_per_token * tokens + p.attention_flops_coeff * attn
    return flops / (p.devices * p.peak_flops * p.compute_efficiency)


def weight_bytes_read(p: Profile, tokens: float) -> float:
    """Bytes of weights one step over ``tokens`` tokens reads (all of them for a dense model)."""
    if not p.experts or tokens <= 0:
        return p.weight_bytes
    touched: float = 1.0 - (1.0 - p.experts_per_token / p.experts) ** tokens
    return p.weight_bytes - p.expert_bytes * (1.0 - touched)


def _memory(p: Profile, kv_tokens_read: float, tokens: float) -> float:
    moved = weight_bytes_read(p, tokens) + kv_tokens_read * p.kv_bytes_per_token
    return moved / (p.devices * p.memory_bandwidth * p.memory_efficiency)


def _allreduce(p: Profile, tokens: float) -> float:
    if p.devices <= 1:
        return 0.0
    calls = ALLREDUCES_PER_LAYER * p.layers
    size = tokens * p.hidden_size * ACTIVATION_BYTES
    return calls * (p.allreduce_latency + size / p.allreduce_bandwidth)


def step_time(p: Profile, work: Sequence[tuple[int, int]]) -> float:
    """Seconds for one iteration; ``work`` holds (new tokens, tokens already cached) per sequence."""
    if not work:
        return 0.0
    tokens = 0
    attn = 0.0
    kv_read = 0
    for new, cached in work:
        tokens += new
        attn += new * (cached + new / 2)
        kv_read += cached + new
    busy = max(_compute(p, tokens, attn), _memory(p, kv_read, tokens))
    return busy + _allreduce(p, tokens) + p.step_overhead + p.per_seq_overhead * len(work)


def prefill_time(p: Profile, prompt_tokens: int, cached: int = 0) -> float:
    """Seconds to prefill a prompt alone in one iteration (no chunking)."""
    return step_time(p, [(prompt_tokens, cached)])


def decode_step_time(p: Profile, contexts: Sequence[int]) -> float:
    """Seconds for one decode iteration of a batch with the given context lengths."""
    return step_time(p, [(1, c) for c in contexts])


def decode_run_time(p: Profile, batch: int, context_sum: int, steps: int) -> float:
    """Seconds for ``steps`` consecutive decode iterations of a fixed batch.

    Exact for the model above: the context sum grows by ``batch`` each step, so compute
    and memory time are both linear in the step index; their maximum is summed piecewise.
    """
    if steps <= 0 or batch <= 0:
        return 0.0
    fixed = _allreduce(p, batch) + p.step_overhead + p.per_seq_overhead * batch
    # step j (0-based): attention term sum(c_i + 1/2) and KV read sum(c_i + 1)
    c0 = _compute(p, batch, context_sum + batch / 2)
    c_slope = _compute(p, 0, batch)
    m0 = _memory(p, context_sum + batch, batch)
    m_slope = _memory(p, batch, batch) - _memory(p, 0, batch)

    def linear_sum(a: float, slope: float, first: int, last: int) -> float:
        # sum_{j=first}^{last-1} (a + slope*j)
        n = last - first
        if n <= 0:
            return 0.0
        return a * n + slope * (first + last - 1) * n / 2

    # where compute overtakes memory (or the reverse), if inside [0, steps)
    first_is_compute = c0 >= m0
    split = steps  # the first regime lasts the whole run unless the lines cross ahead
    if c_slope != m_slope:
        cross = (m0 - c0) / (c_slope - m_slope)
        if cross >= 0:
            split = min(steps, int(cross) + 1)
    if first_is_compute:
        busy = linear_sum(c0, c_slope, 0, split) + linear_sum(m0, m_slope, split, steps)
    else:
        busy = linear_sum(m0, m_slope, 0, split) + linear_sum(c0, c_slope, split, steps)
    return busy + fixed * steps


def transfer_time(p: Profile, kv_tokens: int) -> float:
    """Seconds for ``kv_tokens`` of handed-off KV cache to arrive over the link."""
    return kv_tokens * p.kv_bytes_per_token / p.handoff_bandwidth


def swap_time(p: Profile, kv_tokens: int) -> float:
    """Seconds to move ``kv_tokens`` of KV cache between device and swap space."""
    return kv_tokens * p.kv_bytes_per_token / p.handoff_bandwidth
