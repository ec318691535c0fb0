"""The recorded window: the daemon's finished requests as a trace to replay, and what really happened.

Records come from ``GET /v1/requests`` (:class:`~syshaxd.schema.RequestRecordModel`). The
trace keeps each request's arrival (seconds after the window's first), its prompt tokens
(the daemon's estimate), the tokens it really produced (``max_tokens`` when the daemon
does not know: a request that failed before any token) and its service class at its own
targets (:mod:`sim.advise.levels`). What really happened is measured the way a replay's
prediction is (:func:`measure`, :func:`measure_classes`), each request judged at its own
targets, so the two compare like for like.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.advise.levels import ClassTable, class_table, level_of, targets_of
from sim.report import percentiles
from sim.traces import TraceRequest
from syshaxd.schema import AdviceClass, AdviceClassTargets, RequestRecordModel

__all__ = ["REFUSED", "Measured", "Outcome", "Window", "measure", "measure_classes", "window_of"]

#: The outcomes of a request the box did not answer: refused (queue full, shed, late) or timed out.
REFUSED = frozenset({"rejected", "timeout"})


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
    level: str = "interactive"  # its service class
    ttft_target: float | None = None  # its own targets (None: the decider's)
    tpot_target: float | None = None
    route: str = ""  # where it ran: gpu, cpu, split ("" when it never ran)
    refused: bool = False  # refused or timed out (REFUSED)


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


def _span(outcomes: Sequence[Outcome]) -> float:
    start = min((o.arrival for o in outcomes), default=0.0)
    return max((o.arrival + o.e2e for o in outcomes if o.ok and o.e2e is not None), default=start) - start


def _met(o: Outcome, ttft_target: float, tpot_target: float) -> bool:
    """Finished within its own targets (the given ones where it has none)."""
    ttft = o.ttft_target if o.ttft_target is not None else ttft_target
    tpot = o.tpot_target if o.tpot_target is not None else tpot_target
    return o.ok and o.ttft is not None and o.ttft <= ttft and (o.tpot is None or o.tpot <= tpot)


def measure(outcomes: Sequence[Outcome], ttft_target: float, tpot_target: float) -> Measured:
    """Goodput, throughput and latency quantiles of outcomes (``sim.report``'s nearest rank);
    each request meets its own targets, ``ttft_target`` and ``tpot_target`` where it has none."""
    done = [o for o in outcomes if o.ok]
    span = _span(outcomes)

    def rate(count: float) -> float:
        return count / span if span > 0 else 0.0

    good = sum(1 for o in done if _met(o, ttft_target, tpot_target))
    ttfts = [o.ttft for o in done if o.ttft is not None]
    tpots = [o.tpot for o in done if o.tpot is not None]
    return Measured(
        requests=len(outcomes), completed=len(done), span=span, goodput=rate(good), throughput=rate(len(done)),
        output_tps=rate(sum(o.output_tokens for o in done)), ttft_p50=_quantile(ttfts, "p50"),
        ttft_p99=_quantile(ttfts, "p99"), tpot_p99=_quantile(tpots, "p99"), tpot_p50=_quantile(tpots, "p50"),
        cpu_share=sum(o.cpu for o in done) / len(done) if done else 0.0,
    )


def measure_classes(outcomes: Sequence[Outcome], ttft_target: float, tpot_target: float) -> dict[str, AdviceClass]:
    """Per service class: requests, met, goodput (per second of the whole window's span, so the
    classes add up to :func:`measure`'s), TTFT p99, refusals, and where the completed ones ran."""
    span = _span(outcomes)
    out = {}
    for name in sorted({o.level for o in outcomes}):
        mine = [o for o in outcomes if o.level == name]
        done = [o for o in mine if o.ok]
        met = sum(1 for o in done if _met(o, ttft_target, tpot_target))

        def share(route: str, done: list[Outcome] = done) -> float:
            return sum(o.route == route for o in done) / len(done) if done else 0.0

        out[name] = AdviceClass(
            requests=len(mine), completed=len(done), met=met, goodput=met / span if span > 0 else 0.0,
            ttft_p99=_quantile([o.ttft for o in done if o.ttft is not None], "p99"),
            refused=sum(o.refused for o in mine), gpu_share=share("gpu"), cpu_share=share("cpu"),
            split_share=share("split"))
    return out


@dataclass(frozen=True)
class Window:
    """Recorded requests as a trace, the setting they ran under, and what happened to them."""

    trace: list[TraceRequest]  # in arrival order
    outcomes: list[Outcome]  # the same order
    started: float  # wall time of the first arrival
    policy: str | None  # the policy that decided the latest routed request
    #: The decider's settings it saw (syshaxd.routing.Limits fields); their targets are the
    #: latest request's own (its class's), not the decider's.
    limits: dict[str, Any]
    settings_seen: int  # distinct (policy, limits) pairs in the window
    #: The window's classes (targets, priority, CPU flag) and those the table no longer has.
    classes: dict[str, AdviceClassTargets] = field(default_factory=dict)
    unknown_classes: tuple[str, ...] = ()

    @property
    def span(self) -> float:
        """First arrival to last finish, seconds."""
        ends = [o.arrival + o.e2e for o in self.outcomes if o.e2e is not None]
        return max(ends, default=0.0)


#: Limits a record carries that are its own class's (its targets), not the decider's setting.
_PER_REQUEST = frozenset({"ttft_target", "tpot_target"})


def _setting_key(record: RequestRecordModel) -> tuple[str, str]:
    policy = record.decision.policy if record.decision is not None else ""
    return policy, repr(sorted((k, v) for k, v in record.limits.items() if k not in _PER_REQUEST))


def _route(record: RequestRecordModel) -> str:
    d = record.decision
    if d is None or record.outcome in REFUSED:
        return ""
    return "split" if d.mode == "pd_split" else d.device or ""


def window_of(records: Sequence[RequestRecordModel], table: ClassTable | None = None) -> Window:
    """The trace and outcomes of recorded requests (any order; kept in arrival order), each in
    its class of ``table`` (the daemon's; the shipped table when None).

    Raises:
        ValueError: no records.
    """
    if not records:
        raise ValueError("the daemon has recorded no finished requests yet")
    table = table if table is not None else class_table({})
    ordered = sorted(records, key=lambda r: (r.arrival, r.request_id))
    t0 = ordered[0].arrival
    trace, outcomes = [], []
    for r in ordered:
        produced = r.output_tokens if r.output_tokens is not None and r.output_tokens > 0 else None
        level = level_of(r, table)
        trace.append(TraceRequest(r.arrival - t0, max(1, r.prompt_tokens), produced or max(1, r.max_tokens),
                                  level=level))
        cpu = r.decision is not None and (r.decision.device == "cpu" or r.decision.mode == "pd_split")
        outcomes.append(Outcome(arrival=r.arrival - t0, ok=r.outcome == "ok", ttft=r.ttft, tpot=r.tpot,
                                e2e=r.e2e, output_tokens=produced or 0, cpu=cpu, level=level.name,
                                ttft_target=r.ttft_target, tpot_target=r.tpot_target, route=_route(r),
                                refused=r.outcome in REFUSED))
    routed = [r for r in ordered if r.decision is not None]
    latest = routed[-1] if routed else ordered[-1]
    seen = Counter(_setting_key(r) for r in routed)
    names = [o.level for o in outcomes]
    return Window(trace=trace, outcomes=outcomes, started=t0,
                  policy=latest.decision.policy if latest.decision is not None else None,
                  limits=dict(latest.limits), settings_seen=len(seen),
                  classes=targets_of(names, [(o.ttft_target, o.tpot_target) for o in outcomes], table),
                  unknown_classes=tuple(sorted(set(names) - set(table.levels))))
