"""llama.cpp ``llama-server --metrics`` (and ``--slots`` for the KV-cache usage).

Its ``*_tokens_seconds`` gauges are averaged over the window since the previous scrape and
reset by every scrape, so two scrapers disturb each other: rates come from the token
counters instead. Since mid-2025 ``/metrics`` has no KV-cache figure; ``GET /slots`` gives
each slot's context size and the tokens it holds.
"""

from __future__ import annotations

import json
import math
from typing import Any

from syshaxd.engines.base import Dialect, SlotsReading, count, fraction, nonneg
from syshaxd.engines.promtext import MetricSet, MetricsParseError, wanted_samples
from syshaxd.snapshot import EngineMetrics, HistogramData

_WANTED = wanted_samples(("llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total",
                          "llamacpp:kv_cache_usage_ratio", "llamacpp:requests_processing",
                          "llamacpp:requests_deferred", "llamacpp:prompt_tokens_total",
                          "llamacpp:prompt_seconds_total"))


def parse(text: str) -> EngineMetrics:
    """Read llama-server's /metrics text into the common record."""
    m = MetricSet.parse(text, _WANTED)
    generated = nonneg(m.total("llamacpp:tokens_predicted_total"))
    decode_seconds = nonneg(m.total("llamacpp:tokens_predicted_seconds_total"))
    hists: tuple[tuple[str, HistogramData], ...] = ()
    if generated is not None and decode_seconds is not None:
        # Each slot adds its own decode time, so seconds / tokens is the time per output
        # token a request sees: a one-bucket histogram carries that mean in the common shape.
        hists = (("tpot", HistogramData(((math.inf, generated),), generated, decode_seconds)),)
    return EngineMetrics(
        # Builds before mid-2025 still had the ratio in /metrics.
        kv_cache_usage=fraction(m.total("llamacpp:kv_cache_usage_ratio")),
        running=count(m.total("llamacpp:requests_processing")),
        waiting=count(m.total("llamacpp:requests_deferred")),
        prompt_tokens_total=nonneg(m.total("llamacpp:prompt_tokens_total")),
        prefill_seconds_total=nonneg(m.total("llamacpp:prompt_seconds_total")),
        generation_tokens_total=generated,
        histograms=hists,
    )


def _decoded(slot: dict[str, Any]) -> int:
    """Tokens a slot has decoded for its current request so far."""
    decoded = 0
    next_token = slot.get("next_token")
    if isinstance(next_token, list) and next_token and isinstance(next_token[0], dict):
        decoded = next_token[0].get("n_decoded", 0)
    elif isinstance(next_token, dict):
        decoded = next_token.get("n_decoded", 0)
    return max(0, decoded) if isinstance(decoded, int) else 0


def _slot_tokens(slot: dict[str, Any]) -> int:
    """Tokens a busy slot holds in the KV cache: its prompt plus what it decoded so far.

    ``n_prompt_tokens`` of a busy slot is the slot's whole sequence, decoded tokens included
    (a capture: 374 with ``n_decoded`` 339 for a 35-token prompt): it is not added again.
    """
    if isinstance(slot.get("n_past"), int):  # older builds report the position directly
        return max(0, int(slot["n_past"]))
    prompt = slot.get("n_prompt_tokens", 0)
    return max(0, prompt if isinstance(prompt, int) else 0)


def _busy(slot: dict[str, Any]) -> bool:
    if "is_processing" in slot:
        return bool(slot["is_processing"])
    return bool(slot.get("state", 0) != 0)  # older builds: 0 = idle


def read_slots(text: str) -> SlotsReading:
    """KV-cache usage and live decoded tokens from ``GET /slots``.

    Usage is the tokens held by busy slots over the total context: idle slots keep their
    last prompt for reuse, but that cache is given up on demand, so only busy slots count
    (None for an empty slot list). Decoded tokens are those the busy slots have produced
    for their current requests, which ``tokens_predicted_total`` counts only at the end.

    Raises:
        MetricsParseError: the body is not the JSON list of slot objects llama-server sends.
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MetricsParseError(f"/slots is not JSON: {exc}") from None
    if not isinstance(data, list) or not all(isinstance(s, dict) for s in data):
        raise MetricsParseError("/slots is not a list of slot objects")
    capacity = 0
    used = 0
    decoding = 0
    for slot in data:
        n_ctx = slot.get("n_ctx")
        if not isinstance(n_ctx, int) or n_ctx <= 0:
            raise MetricsParseError("/slots: a slot has no positive n_ctx")
        capacity += n_ctx
        if _busy(slot):
            used += min(_slot_tokens(slot), n_ctx)
            decoding += _decoded(slot)
    return SlotsReading(used / capacity if capacity else None, decoding)


LLAMACPP = Dialect(
    name="llamacpp",
    metrics_path="/metrics",
    parse=parse,
    health_path="/health",
    slots_path="/slots",
    read_slots=read_slots,
    description="llama.cpp llama-server --metrics (--slots for KV-cache usage)",
)
