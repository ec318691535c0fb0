"""The recorded window: the daemon's finished requests as a trace to replay, and what really happened.

Records come from ``GET /v1/requests`` (:class:`~syshaxd.schema.RequestRecordModel`). The
trace keeps each request's arrival (seconds after the window's first), its prompt tokens
(the daemon's estimate) and the tokens it really produced (``max_tokens`` when the daemon
does not know: a request that failed before any token). What really happened is measured
the way a replay's prediction is (:func:`measure`), so the two compare like for like.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.report import percentiles
from sim.traces import TraceRequest
from syshaxd.schema import RequestRecordModel

__all__ = ["Measured", "Outcome", "Window", "measure", "window_of"]


@dataclass(frozen=True)
class Outcome:
    """One request's fate in wall seconds, recorded or predicted alike."""

    arrival: float  # seconds after the window's first arrival
    ok: bool
    ttft: float | None
    tpot: float | None
    e2e: float | None
    output_tokens: int
    cpu: bool = False  # the CPU served it, whole or its decode


@dataclass(frozen=True)
class Measured:
    """What a window comes to: rates per second of its span, latencies in seconds."""

    requests: int
    completed: int
    span: float  # first arrival to last finish
    goodput: float  # completed requests meeting both targets, per second
    throughput: float  # completed requests per second
    output_tps: float  # output tokens of completed requests per second
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p99: float | None
    cpu_share: float  # completed requests the CPU served (whole or decode)
    tpot_p50: float | None = None


def _quantile(values: list[float], key: str) -> float | None:
    return percentiles(values)[key] if values else None


def measure(outcomes: Sequence[Outcome], ttft_target: float, tpot_target: float) -> Measured:
    """Goodput, throughput and latency quantiles of outcomes (``sim.report``'s nearest rank)."""
    done = [o for o in outcomes if o.ok]
    start = min((o.arrival for o in outcomes), default=0.0)
    end = max((o.arrival + o.e2e for o in done if o.e2e is not None), default=start)
    span = end - start

    def rate(count: float) -> float:
        return count / span if span > 0 else 0.0

    good = sum(1 for o in done if o.ttft is not None and o.ttft <= ttft_target
               and (o.tpot is None or o.tpot <= tpot_target))
    ttfts = [o.ttft for o in done if o.ttft is not None]
    tpots = [o.tpot for o in done if o.tpot is not None]
    return Measured(
        requests=len(outcomes), completed=len(done), span=span, goodput=rate(good), throughput=rate(len(done)),
        output_tps=rate(sum(o.output_tokens for o in done)), ttft_p50=_quantile(ttfts, "p50"),
        ttft_p99=_quantile(ttfts, "p99"), tpot_p99=_quantile(tpots, "p99"), tpot_p50=_quantile(tpots, "p50"),
        cpu_share=sum(o.cpu for o in done) / len(done) if done else 0.0,
    )


@dataclass(frozen=True)
class Window:
    """Recorded requests as a trace, the setting they ran under, and what happened to them."""

    trace: list[TraceRequest]  # in arrival order
    outcomes: list[Outcome]  # the same order
    started: float  # wall time of the first arrival
    policy: str | None  # the policy that decided the latest routed request
    limits: dict[str, Any]  # the decider's settings it saw (syshaxd.routing.Limits fields)
    settings_seen: int  # distinct (policy, limits) pairs in the window

    @property
    def span(self) -> float:
        """First arrival to last finish, seconds."""
        ends = [o.arrival + o.e2e for o in self.outcomes if o.e2e is not None]
        return max(ends, default=0.0)


def _setting_key(record: RequestRecordModel) -> tuple[str, str]:
    policy = record.decision.policy if record.decision is not None else ""
    return policy, repr(sorted(record.limits.items()))


def window_of(records: Sequence[RequestRecordModel]) -> Window:
    """The trace and outcomes of recorded requests (any order; kept in arrival order).

    Raises:
        ValueError: no records.
    """
    if not records:
        raise ValueError("the daemon has recorded no finished requests yet")
    ordered = sorted(records, key=lambda r: (r.arrival, r.request_id))
    t0 = ordered[0].arrival
    trace, outcomes = [], []
    for r in ordered:
        produced = r.output_tokens if r.output_tokens is not None and r.output_tokens > 0 else None
        trace.append(TraceRequest(r.arrival - t0, max(1, r.prompt_tokens), produced or max(1, r.max_tokens)))
        cpu = r.decision is not None and (r.decision.device == "cpu" or r.decision.mode == "pd_split")
        outcomes.append(Outcome(arrival=r.arrival - t0, ok=r.outcome == "ok", ttft=r.ttft, tpot=r.tpot,
                                e2e=r.e2e, output_tokens=produced or 0, cpu=cpu))
    routed = [r for r in ordered if r.decision is not None]
    latest = routed[-1] if routed else ordered[-1]
    seen = Counter(_setting_key(r) for r in routed)
    return Window(trace=trace, outcomes=outcomes, started=t0,
                  policy=latest.decision.policy if latest.decision is not None else None,
                  limits=dict(latest.limits), settings_seen=len(seen))
