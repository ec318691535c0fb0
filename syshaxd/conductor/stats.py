"""The conductor's own numbers: recent decisions, latency windows, and Prometheus metrics."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter

from syshaxd.schema import DecisionModel

#: Estimates within this factor (or this many seconds) of what happened count as accurate.
ACCURACY_FACTOR = 0.5
ACCURACY_SLACK_S = 0.5
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)


def reason_key(reason: str) -> str:
    """The category of a policy reason: the text before the first ':' (``"gpu busy: ..."``)."""
    head = reason.split(":", 1)[0].strip()
    return head[:60] or "unspecified"


@dataclass
class Stats:
    """Counters, windows and Prometheus collectors of one conductor."""

    window_s: float = 60.0
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    #: The most recent decisions by request id, oldest first (at most ``keep_decisions``).
    decisions: OrderedDict[str, DecisionModel] = field(default_factory=OrderedDict)
    keep_decisions: int = 200
    ttfts: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=4096))
    finishes: deque[float] = field(default_factory=lambda: deque(maxlen=8192))
    by_route: Counter[str] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)
    by_outcome: Counter[str] = field(default_factory=Counter)
    requests_total: int = 0
    resubmits_total: int = 0
    probe_requests_total: int = 0  # calibrate's probes: served, not recorded
    accurate: int = 0
    estimated: int = 0

    def __post_init__(self) -> None:
        r = self.registry
        self.m_requests = PromCounter(
            "syshax_requests", "Requests by device, mode and outcome", ["device", "mode", "outcome"], registry=r
        )
        self.m_decisions = PromCounter(
            "syshax_decisions", "Routing decisions by policy, device, mode and reason",
            ["policy", "device", "mode", "reason"], registry=r,
        )
        self.m_resubmits = PromCounter("syshax_resubmits", "Requests resubmitted to the other device", registry=r)
        self.m_probes = PromCounter(
            "syshax_probe_requests", "Requests marked as syshax calibrate's probes: served, left out of the "
            "request records", registry=r)
        self.m_ttft = Histogram(
            "syshax_time_to_first_token_seconds", "Time to first byte of the answer",
            ["device", "mode"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.m_e2e = Histogram(
            "syshax_e2e_request_latency_seconds", "Whole request latency",
            ["device", "mode"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.m_queue = Gauge("syshax_queue_depth", "Requests waiting for capacity", registry=r)
        self.m_inflight = Gauge("syshax_inflight", "Requests in flight per engine", ["engine"], registry=r)
        self.m_process = PromCounter(
            "syshax_process_requests", "Requests each API process took (0: the daemon, 1...: workers)", ["process"],
            registry=r)
        self.m_engine_state = Gauge(
            "syshax_engine_state", "1 for the engine's current state", ["engine", "state"], registry=r
        )
        self.m_class_requests = PromCounter(
            "syshax_class_requests", "Requests by service class and outcome", ["class", "outcome"], registry=r)
        self.m_class_goodput = PromCounter(
            "syshax_class_goodput", "Requests answered whole within their own class's targets", ["class"], registry=r)
        self.m_class_refused = PromCounter(
            "syshax_class_refusals", "Requests refused by service class and reason (shed, queue_full, "
            "ttft_expired, no_engine, stopping, queue_timeout)", ["class", "reason"], registry=r)
        self.m_class_queue = Gauge("syshax_class_queue_depth", "Requests waiting for capacity, by service class",
                                   ["class"], registry=r)
        #: (time.time(), class, met) of recent finishes: goodput per class over the window.
        self.class_finishes: deque[tuple[float, str, bool]] = deque(maxlen=8192)
        #: Requests waiting now, by class (the conductor sets it: the core's line).
        self.queue_by_class: Callable[[], Mapping[str, int]] = dict
        self._queued_classes: set[str] = set()

        # A labelled series looked up once, then kept: labels() costs more than the increment.
        self._series: dict[tuple[object, ...], Any] = {}

    def _series_of(self, metric: Any, *labels: str) -> Any:
        key = (metric, *labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(*labels)
        return series

    def taken(self, process: str) -> None:
        """Count a request API process ``process`` took (``services.conductor.workers``)."""
        self._series_of(self.m_process, process).inc()

    def record_decision(self, decision: DecisionModel) -> None:
        """Remember a routing decision."""
        self.requests_total += 1
        self.decisions[decision.request_id] = decision
        if len(self.decisions) > self.keep_decisions:
            self.decisions.popitem(last=False)
        key = reason_key(decision.reason)
        self.by_reason[key] += 1
        self.by_route[f"{decision.device or 'none'}/{decision.mode}"] += 1
        self._series_of(self.m_decisions, decision.policy, decision.device or "none", decision.mode, key).inc()

    def record_finish(
        self,
        decision: DecisionModel,
        outcome: str,
        ttft: float | None,
        e2e: float,
        now: float | None = None,
    ) -> DecisionModel:
        """Record how a request ended; returns the decision with its outcome filled in."""
        now = time.time() if now is None else now
        device, mode = decision.device or "none", decision.mode
        self.by_outcome[outcome] += 1
        self._series_of(self.m_requests, device, mode, outcome).inc()
        self.finishes.append(now)
        if ttft is not None:
            self.ttfts.append((now, ttft))
            self._series_of(self.m_ttft, device, mode).observe(ttft)
            if decision.est_ttft is not None:
                self.estimated += 1
                if abs(ttft - decision.est_ttft) <= max(ACCURACY_SLACK_S, ACCURACY_FACTOR * ttft):
                    self.accurate += 1
        self._series_of(self.m_e2e, device, mode).observe(e2e)
        finished = decision.model_copy(update={"outcome": outcome, "ttft": ttft, "e2e": e2e})
        if decision.request_id in self.decisions:
            self.decisions[decision.request_id] = finished
        return finished

    def record_resubmit(self) -> None:
        """Count a request resubmitted to the other device."""
        self.resubmits_total += 1
        self.m_resubmits.inc()

    def record_probe(self) -> None:
        """Count a probe of ``syshax calibrate`` the request records leave out."""
        self.probe_requests_total += 1
        self.m_probes.inc()

    def record_class(self, service_class: str, outcome: str, met: bool | None, now: float | None = None) -> None:
        """Count a finished request of a class, and whether it met its own targets."""
        self._series_of(self.m_class_requests, service_class, outcome).inc()
        if met:
            self._series_of(self.m_class_goodput, service_class).inc()
        self.class_finishes.append((time.time() if now is None else now, service_class, bool(met)))

    def record_refusal(self, service_class: str, reason: str) -> None:
        """Count a request the core refused (its reason: the ``x-syshax-refused-reason`` header)."""
        self._series_of(self.m_class_refused, service_class, reason).inc()

    def by_class(self, now: float | None = None) -> dict[str, tuple[int, float, float]]:
        """Per class over the window: (waiting now, finished/s, goodput/s)."""
        now = time.time() if now is None else now
        finished: Counter[str] = Counter()
        met: Counter[str] = Counter()
        for t, name, good in self.class_finishes:
            if now - t <= self.window_s:
                finished[name] += 1
                met[name] += good
        waiting = self.queue_by_class()
        names = sorted(set(finished) | set(waiting))
        return {n: (waiting.get(n, 0), finished[n] / self.window_s, met[n] / self.window_s) for n in names}

    def record_unrouted(self, outcome: str) -> None:
        """Count a request that ended before any engine was chosen (queue timeout, shutdown)."""
        self.by_outcome[outcome] += 1
        self._series_of(self.m_requests, "none", "none", outcome).inc()

    def ttft_quantiles(self, now: float | None = None) -> tuple[float | None, float | None]:
        """TTFT p50 and p99 over the window."""
        now = time.time() if now is None else now
        values = sorted(v for t, v in self.ttfts if now - t <= self.window_s)
        if not values:
            return None, None

        def q(p: float) -> float:
            return values[min(len(values) - 1, int(p * len(values)))]

        return q(0.5), q(0.99)

    def requests_per_s(self, now: float | None = None, span: float = 10.0) -> float:
        """Finished requests per second over the last ``span`` seconds."""
        now = time.time() if now is None else now
        return sum(1 for t in self.finishes if now - t <= span) / span

    def accuracy(self) -> float | None:
        """Share of TTFT estimates that were close to what happened."""
        return self.accurate / self.estimated if self.estimated else None

    def exposition(self) -> bytes:
        """Prometheus text of the conductor's own metrics."""
        waiting = self.queue_by_class()
        self._queued_classes.update(waiting)
        for name in self._queued_classes:  # a class no longer waiting reads 0
            self._series_of(self.m_class_queue, name).set(waiting.get(name, 0))
        return generate_latest(self.registry)
