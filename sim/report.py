"""Results of a virtual-time run: per-request records, a summary, and tables/JSON of them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table


@dataclass(frozen=True)
class RequestResult:
    """One request's fate: latencies in virtual seconds, where its tokens were made."""

    index: int
    arrival: float
    prompt_tokens: int
    output_tokens: int  # tokens the client received
    ttft: float | None
    tpot: float | None
    e2e: float | None
    route: str  # gpu, cpu, split, none
    gpu_tokens: int
    cpu_tokens: int
    reasks: int
    outcome: str  # ok, rejected, timeout, error
    engines: str = ""  # the engines it was placed on ("gpu0", "gpu0+cpu0" for a split)
    mode: str = ""  # whole, pd_split ("" when never placed)
    held: bool = False  # whether it waited in the conductor's line
    level: str = "interactive"  # its service class
    met: bool = False  # finished within its own class's TTFT and TPOT targets
    refusal: str = ""  # why it never ran or was cut short (the core's reason, or request_timeout)


@dataclass(frozen=True)
class ClassSummary:
    """One service class's share of a run: each request judged at its own class's targets."""

    requests: int
    completed: int
    met: int  # finished within the class's targets
    refusals: dict[str, int]  # by reason (queue_full, shed, ttft_expired, queue_timeout, request_timeout, ...)


@dataclass(frozen=True)
class DeviceSummary:
    """One device's share of the work."""

    engines: int
    request_share: float  # requests that ran (partly) here / completed requests
    token_share: float  # output tokens made here / all output tokens
    utilisation: float  # busy seconds / (engines x makespan)
    preemptions: int


@dataclass(frozen=True)
class Summary:
    """What a run comes to."""

    requests: int
    completed: int
    rejected: int
    timed_out: int
    errors: int
    makespan: float
    output_tokens: int
    throughput: float  # output tokens per second of makespan
    ttft: dict[str, float]  # mean, p50, p90, p99
    tpot: dict[str, float]
    e2e: dict[str, float]
    routes: dict[str, int]
    devices: dict[str, DeviceSummary]
    classes: dict[str, ClassSummary]


@dataclass(frozen=True)
class RunResult:
    """Per-request records, the summary, and the decision counts of one run."""

    requests: list[RequestResult]
    summary: Summary
    decisions: dict[str, int]

    def to_json(self, with_requests: bool = False) -> dict[str, Any]:
        """A JSON-ready dict (per-request records only when asked)."""
        out: dict[str, Any] = {"summary": asdict(self.summary), "decisions": self.decisions}
        if with_requests:
            out["requests"] = [asdict(r) for r in self.requests]
        return out


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """Mean and p50/p90/p99 (nearest rank); NaN when empty."""
    if not values:
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"mean": sum(ordered) / len(ordered), "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99)}


def summarise(records: Sequence[RequestResult], busy: dict[str, float], devices: dict[str, str],
              preemptions: dict[str, int], end: float | None = None) -> Summary:
    """Summary of per-request records plus engine busy time; ``end`` is when the run ended."""
    done = [r for r in records if r.outcome == "ok"]
    start = min((r.arrival for r in records), default=0.0)
    last = max((r.arrival + r.e2e for r in done if r.e2e is not None), default=start)
    makespan = max((end if end is not None else last) - start, 0.0)
    tokens = sum(r.output_tokens for r in done)
    routes: dict[str, int] = {}
    for r in records:
        routes[r.route] = routes.get(r.route, 0) + 1
    per_device: dict[str, DeviceSummary] = {}
    for device in sorted(set(devices.values())):
        names = [n for n, d in devices.items() if d == device]
        made = sum(r.gpu_tokens if device == "gpu" else r.cpu_tokens for r in done)
        touched = sum(1 for r in done if (r.gpu_tokens if device == "gpu" else r.cpu_tokens) > 0
                      or r.route == device)
        per_device[device] = DeviceSummary(
            engines=len(names),
            request_share=touched / len(done) if done else 0.0,
            token_share=made / tokens if tokens else 0.0,
            utilisation=sum(busy[n] for n in names) / (len(names) * makespan) if makespan > 0 else 0.0,
            preemptions=sum(preemptions[n] for n in names),
        )
    return Summary(
        requests=len(records), completed=len(done),
        rejected=sum(r.outcome == "rejected" for r in records),
        timed_out=sum(r.outcome == "timeout" for r in records),
        errors=sum(r.outcome == "error" for r in records),
        makespan=makespan, output_tokens=tokens, throughput=tokens / makespan if makespan > 0 else 0.0,
        ttft=percentiles([r.ttft for r in done if r.ttft is not None]),
        tpot=percentiles([r.tpot for r in done if r.tpot is not None]),
        e2e=percentiles([r.e2e for r in done if r.e2e is not None]),
        routes=routes, devices=per_device, classes=by_class(records),
    )


def by_class(records: Sequence[RequestResult]) -> dict[str, ClassSummary]:
    """Requests, completions, targets met and refusals by reason, per service class."""
    out: dict[str, ClassSummary] = {}
    for name in sorted({r.level for r in records}):
        mine = [r for r in records if r.level == name]
        refusals: dict[str, int] = {}
        for r in mine:
            if r.refusal:
                refusals[r.refusal] = refusals.get(r.refusal, 0) + 1
        out[name] = ClassSummary(len(mine), sum(r.outcome == "ok" for r in mine), sum(r.met for r in mine),
                                 dict(sorted(refusals.items())))
    return out


def summary_table(summary: Summary, title: str = "virtual-time run") -> Table:
    """A rich table of a summary."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("requests (completed / rejected / timed out / errors)",
                  f"{summary.requests} ({summary.completed} / {summary.rejected} / {summary.timed_out} / {summary.errors})")
    table.add_row("makespan", f"{summary.makespan:,.1f} s")
    table.add_row("output tokens/s", f"{summary.throughput:,.1f}")
    for name, stats in (("TTFT", summary.ttft), ("TPOT", summary.tpot), ("e2e", summary.e2e)):
        scale, unit = (1000.0, "ms") if name == "TPOT" else (1.0, "s")
        table.add_row(f"{name} mean / p50 / p90 / p99",
                      " / ".join(f"{stats[k] * scale:,.3g}" for k in ("mean", "p50", "p90", "p99")) + f" {unit}")
    table.add_row("routes", ", ".join(f"{k} {v}" for k, v in sorted(summary.routes.items())))
    for device, d in summary.devices.items():
        table.add_row(f"{device}: requests / tokens / utilisation / preemptions",
                      f"{d.request_share:.0%} / {d.token_share:.0%} / {d.utilisation:.0%} / {d.preemptions}")
    for name, c in summary.classes.items():
        refused = ", ".join(f"{k} {v}" for k, v in c.refusals.items()) or "none"
        table.add_row(f"class {name}: requests / completed / met its targets / refused",
                      f"{c.requests} / {c.completed} / {c.met} / {refused}")
    return table
