"""What every engine dialect provides, and the value checks all of them share."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from syshaxd.snapshot import EngineMetrics


@dataclass(frozen=True)
class SlotsReading:
    """What ``GET /slots`` says: KV-cache usage (0..1, None for no slots) and tokens decoded
    so far by the busy slots."""

    kv_cache_usage: float | None
    decoding_tokens: int


@dataclass(frozen=True)
class Dialect:
    """How to watch one kind of engine: where its numbers are and how to read them.

    ``parse`` is pure (text in, record out) and raises
    :class:`~syshaxd.engines.promtext.MetricsParseError` on text that is not Prometheus
    text. ``read_slots`` (llama.cpp) reads ``GET /slots`` JSON into a KV-cache usage
    fraction and the tokens running requests have decoded so far; the monitor merges them
    into the record when ``/metrics`` has no KV-cache figure.
    """

    name: str
    metrics_path: str | None  # None: the engine has no /metrics (health is probed instead)
    parse: Callable[[str], EngineMetrics]
    health_path: str = "/v1/models"
    slots_path: str | None = None
    read_slots: Callable[[str], SlotsReading] | None = None
    description: str = ""


def count(value: float | None) -> int | None:
    """A request count from a gauge: a finite, non-negative integer, else None."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return int(round(value))


def fraction(value: float | None) -> float | None:
    """A 0..1 usage fraction; values a little above 1 (rounding) are clipped, nonsense is None."""
    if value is None or not math.isfinite(value) or value < 0 or value > 1.05:
        return None
    return min(value, 1.0)


def nonneg(value: float | None) -> float | None:
    """A counter or rate: finite and non-negative, else None."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return value
