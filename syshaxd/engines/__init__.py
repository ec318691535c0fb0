"""Engines: how to talk to one (the client and its connection pool) and how to read its numbers.

``EngineClient`` sends requests to one engine and classifies failures (``EngineFailure`` is
worth trying elsewhere, ``EngineRejected`` is the client's own mistake); ``engine_events``
reads its answer stream. ``get_dialect(name)`` returns the :class:`Dialect` for a config
name (``vllm-v1``, ``vllm-v0``, ``llamacpp``, ``sglang``, ``openai``): where each engine
keeps its numbers and how to read them. Parsing is pure; rates over time live in
:mod:`syshaxd.engines.rates`.
"""

from __future__ import annotations

from syshaxd.engines.base import Dialect, SlotsReading
from syshaxd.engines.client import EngineClient
from syshaxd.engines.connection import ConnectionLost, ConnectionPool, Sink, set_nodelay
from syshaxd.engines.exchange import EngineResponse, Exchange, engine_events
from syshaxd.engines.failures import (
    EngineFailure,
    EngineRejected,
    describe_error,
    json_answer,
)
from syshaxd.engines.llamacpp import LLAMACPP
from syshaxd.engines.plain import OPENAI
from syshaxd.engines.promtext import MetricSet, MetricsParseError
from syshaxd.engines.rates import RATE_WINDOW, RateTracker
from syshaxd.engines.sglang import SGLANG
from syshaxd.engines.vllm import VLLM_V0, VLLM_V1

DIALECTS: dict[str, Dialect] = {d.name: d for d in (VLLM_V1, VLLM_V0, LLAMACPP, SGLANG, OPENAI)}


def get_dialect(name: str) -> Dialect:
    """The dialect of a config name.

    Raises:
        KeyError: unknown name (the config's validation prevents this for loaded configs).
    """
    try:
        return DIALECTS[name]
    except KeyError:
        raise KeyError(f"unknown engine dialect {name!r}; known: {', '.join(DIALECTS)}") from None


__all__ = [
    "DIALECTS", "ConnectionLost", "ConnectionPool", "Dialect", "EngineClient", "EngineFailure", "EngineRejected", "EngineResponse",
    "Exchange", "MetricSet", "MetricsParseError", "RATE_WINDOW", "RateTracker", "Sink", "SlotsReading", "describe_error",
    "engine_events", "get_dialect", "json_answer", "set_nodelay",
]  # fmt: skip
