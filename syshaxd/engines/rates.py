"""Rates from cumulative counters: tokens/s, requests/s and recent latency means.

One small stateful object per engine, fed each parsed record with the time of its scrape.
Counters are differenced over a short window of wall time; a counter that goes down means
the engine restarted, and the new value is all that was counted since (as PromQL's
``rate()`` does). A rate the engine reports as a gauge is kept as it is.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import replace

from syshaxd.snapshot import EngineMetrics


class _Counter:
    """A counter made monotonic across resets."""

    __slots__ = ("adjusted", "last")

    def __init__(self) -> None:
        self.last: float | None = None
        self.adjusted = 0.0

    def feed(self, value: float) -> float:
        if self.last is not None:
            self.adjusted += value - self.last if value >= self.last else value
        self.last = value
        return self.adjusted


def _counters(metrics: EngineMetrics) -> dict[str, float]:
    values: dict[str, float | None] = {
        "prompt": metrics.prompt_tokens_total,
        "generation": metrics.generation_tokens_total,
        "finished": metrics.requests_finished_total,
        "prefill_seconds": metrics.prefill_seconds_total,
    }
    for name in ("tpot", "ttft"):
        hist = metrics.histogram(name)
        if hist is not None:
            values[f"{name}_sum"] = hist.sum
            values[f"{name}_count"] = hist.count
    return {k: v for k, v in values.items() if v is not None and math.isfinite(v) and v >= 0}


#: Seconds token and request rates average over (:class:`RateTracker`'s ``window``).
RATE_WINDOW = 5.0
#: Seconds the TPOT/TTFT means average over (:class:`RateTracker`'s ``latency_window``).
LATENCY_WINDOW = 30.0
#: Fewest prompt tokens a prefill-speed measurement is taken from. A step's fixed cost
#: dominates a tiny prefill: the startup check's 2-token prompt, or the one token a
#: handoff's continuation computes, "prefills" at ~50 tokens/s on a Xeon that does ~240 on
#: a real prompt, and that figure would shut the CPU out of every prompt it serves in time.
MIN_PREFILL_TOKENS = 64


class RateTracker:
    """Turns one engine's successive records into rates over the last ``window`` seconds.

    Args:
        window: seconds of history token and request rates average over (at least the
            last two scrapes are always used, however far apart).
        latency_window: seconds the TPOT/TTFT means average over: longer, because one long
            prefill stalls every decode for a moment and a short window makes that a trend.
    """

    def __init__(self, window: float = RATE_WINDOW, latency_window: float = LATENCY_WINDOW) -> None:
        self.window = window
        self.latency_window = latency_window
        self._counters: dict[str, _Counter] = {}
        self._history: deque[tuple[float, dict[str, float]]] = deque()
        self._tpot: float | None = None
        self._tpot_batch: float | None = None
        self._ttft: float | None = None
        self._prefill_speed: float | None = None
        self._live: tuple[float, float] | None = None  # (generation counter, with running tokens)

    def reset(self) -> None:
        """Forget all history (the next record starts afresh)."""
        self._counters.clear()
        self._history.clear()
        self._tpot = self._tpot_batch = self._ttft = self._prefill_speed = None
        self._live = None

    def update(self, metrics: EngineMetrics, now: float) -> EngineMetrics:
        """Record a scrape taken at ``now`` (seconds, monotonic) and return it with rates filled.

        ``prefill_tps``/``decode_tps`` the dialect read from a gauge stay; otherwise they
        come from counter deltas. ``tpot_recent``/``ttft_recent`` are the means of what
        happened inside the latency window (``tpot_batch`` the mean number of requests
        decoding meanwhile), and ``prefill_speed`` the prompt tokens per second of prefill
        time there; all keep their last value while nothing new happens.
        """
        if self._history and now <= self._history[-1][0]:
            return self._fill(metrics, {})  # clock did not advance: no new information
        values = _counters(metrics)
        if "generation" in values:
            values["generation"] = self._with_running(values["generation"], metrics.generation_tokens_running)
        adjusted = {key: self._counters.setdefault(key, _Counter()).feed(value) for key, value in values.items()}
        self._history.append((now, adjusted))
        keep = max(self.window, self.latency_window)
        while len(self._history) > 2 and now - self._history[1][0] >= keep:
            self._history.popleft()
        deltas: dict[str, tuple[float, float]] = {}
        for key, value in adjusted.items():
            window = self.latency_window if key.startswith(("tpot_", "ttft_", "prefill_")) else self.window
            base = self._baseline(now, key, window)
            if base is not None:
                deltas[key] = (value - base[1], now - base[0])
        if "prefill_seconds" in deltas and "prompt" in adjusted:
            # Prompt tokens over the same (latency) window as the prefill seconds.
            base = self._baseline(now, "prompt", self.latency_window)
            if base is not None:
                deltas["prompt_latency"] = (adjusted["prompt"] - base[1], now - base[0])
        return self._fill(metrics, deltas)

    def _with_running(self, counter: float, running: int | None) -> float:
        """The generation counter plus tokens running requests decoded so far, never going back.

        The counter and the running tokens come from two reads (llama.cpp's /metrics, then
        /slots): a request ending between them is counted in both or in neither for one
        scrape. Holding the sum at its highest keeps that from looking like a restart; a
        drop of the counter itself still is one.
        """
        live = counter + (running or 0)
        if self._live is not None and counter >= self._live[0]:
            live = max(live, self._live[1])
        self._live = (counter, live)
        return live

    def _baseline(self, now: float, key: str, window: float) -> tuple[float, float] | None:
        """The newest earlier point at least ``window`` old, else the oldest one holding ``key``.

        The history is in time order, so the points old enough are a prefix of it: a binary
        search finds its end (a scan of every point for every key cost a replay in virtual
        time, with thousands of scrapes in the window, most of its run time).
        """
        history = self._history
        cut = bisect.bisect_right(history, now - window, key=lambda point: point[0])
        for i in range(cut - 1, -1, -1):
            then, old = history[i]
            if key in old and then < now:
                return then, old[key]
        for then, old in history:
            if then >= now:
                break
            if key in old:
                return then, old[key]
        return None

    def _fill(self, metrics: EngineMetrics, deltas: dict[str, tuple[float, float]]) -> EngineMetrics:
        def rate(key: str) -> float | None:
            if key not in deltas:
                return None
            increase, seconds = deltas[key]
            return increase / seconds if seconds > 0 else None

        def mean(name: str) -> float | None:
            total, n = deltas.get(f"{name}_sum"), deltas.get(f"{name}_count")
            if total is None or n is None or n[0] <= 0:
                return None
            value = total[0] / n[0]
            return value if math.isfinite(value) and value >= 0 else None

        tpot = mean("tpot")
        if tpot:
            self._tpot = tpot
            # The gaps between tokens add up, per request, to the time it spent decoding:
            # their sum over the window's length is how many requests decoded at once.
            self._tpot_batch = rate("tpot_sum")
        self._ttft = mean("ttft") or self._ttft
        self._prefill_speed = _speed(deltas.get("prompt_latency"), deltas.get("prefill_seconds")) or self._prefill_speed
        return replace(
            metrics,
            prefill_tps=metrics.prefill_tps if metrics.prefill_tps is not None else rate("prompt"),
            decode_tps=metrics.decode_tps if metrics.decode_tps is not None else rate("generation"),
            finish_rate=rate("finished"),
            tpot_recent=self._tpot,
            tpot_batch=self._tpot_batch,
            ttft_recent=self._ttft,
            prefill_speed=self._prefill_speed,
        )


def _speed(tokens: tuple[float, float] | None, seconds: tuple[float, float] | None) -> float | None:
    """Prompt tokens per second spent prefilling, when the window holds both and enough prefill
    (``MIN_PREFILL_TOKENS``) to measure a speed."""
    if tokens is None or seconds is None or seconds[0] <= 1e-6 or tokens[0] < MIN_PREFILL_TOKENS:
        return None
    value = tokens[0] / seconds[0]
    return value if math.isfinite(value) else None
