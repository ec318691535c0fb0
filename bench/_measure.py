"""What one benchmark run measured: per-request outcomes in, the summary metrics out.

Definitions (also in docs/benchmarks.md):

- a request *meets the targets* when it finished, its TTFT <= the TTFT target and its TPOT
  (time per output token after the first: ``(e2e - ttft) / (output - 1)``) <= the TPOT target;
- **goodput** = the offered rate times the share of requests that met the targets, so
  it stops growing where the system stops keeping up;
- completed requests/s and output tokens/s are over the makespan (first arrival to the
  last finish), i.e. what the hardware delivered;
- a request that never finished (rejected, timed out) counts as missing both targets and
  as infinitely late in the percentiles; ``ttft_p99_finished`` is the P99 TTFT over the
  requests that finished, defined whenever one did, to be read beside how many did not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Outcome:
    """One request as the run saw it (times in seconds since its arrival)."""

    arrival: float
    prompt_tokens: int
    output_tokens: int  # tokens the client received
    ttft: float | None  # None: no token ever came
    e2e: float | None  # None: did not finish
    cpu_tokens: int = 0  # output tokens the CPU generated
    route: str = "gpu"  # gpu, cpu, split (any mix of devices), none
    outcome: str = "ok"  # ok, rejected (admission queue full), timeout, error
    level: str = "interactive"  # its service class
    #: Whether it met its own class's targets (the runner judges it); None: judge it at the run's targets.
    met: bool | None = None
    refusal: str = ""  # why it never ran or was cut short (queue_full, shed, ttft_expired, ...)

    @property
    def tpot(self) -> float | None:
        """Mean seconds per output token after the first (0 for one-token answers)."""
        if self.ttft is None or self.e2e is None:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0

    def meets(self, ttft_target: float, tpot_target: float) -> bool:
        """Whether the request finished within both targets (its own class's, when the run judged it)."""
        if self.met is not None:
            return self.met
        tpot = self.tpot
        return self.ttft is not None and tpot is not None and self.ttft <= ttft_target and tpot <= tpot_target


@dataclass(frozen=True)
class Summary:
    """The metrics of one run (policy x rate); JSON-ready."""

    offered_rate: float
    requests: int
    completed: int
    completed_rps: float
    output_tps: float
    ttft_p50: float | None
    ttft_p99: float | None
    ttft_p99_finished: float | None  # over the requests that finished (None: none did)
    tpot_p50: float | None
    tpot_p99: float | None
    e2e_p99: float | None
    attainment: float  # share of requests meeting both targets
    goodput: float  # requests/s meeting both targets
    cpu_request_share: float  # requests the CPU served at least partly
    cpu_token_share: float  # output tokens generated on the CPU
    gpu_util: float
    cpu_util: float
    makespan: float
    rejected: int  # admission queue full (429)
    timed_out: int  # request_timeout (504)
    gpu_preemptions: int
    #: Per service class: requests, completed, met (its own targets), attainment, goodput, refusals by reason.
    by_class: dict[str, dict[str, object]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | int | None]:
        """Plain JSON values (None where a percentile is infinite: some request never finished)."""
        return asdict(self)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile by the nearest-rank method (``inf`` passes through)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def summarise(
    outcomes: Sequence[Outcome],
    *,
    offered_rate: float,
    ttft_target: float,
    tpot_target: float,
    gpu_busy: float,
    cpu_busy: float,
    gpu_preemptions: int = 0,
) -> Summary:
    """Reduce one run's outcomes to its Summary; ``*_busy`` are engine busy seconds."""
    n = len(outcomes)
    if n == 0:
        raise ValueError("a run without requests has no summary")
    first = min(o.arrival for o in outcomes)
    ends = [o.arrival + o.e2e for o in outcomes if o.e2e is not None]
    makespan = max(ends) - first if ends else math.inf
    done = [o for o in outcomes if o.e2e is not None]
    inf = math.inf
    ttfts = [o.ttft if o.ttft is not None else inf for o in outcomes]
    tpots = [t if (t := o.tpot) is not None else inf for o in outcomes]
    e2es = [o.e2e if o.e2e is not None else inf for o in outcomes]
    met = sum(o.meets(ttft_target, tpot_target) for o in outcomes)
    tokens = sum(o.output_tokens for o in outcomes)
    cpu_tokens = sum(o.cpu_tokens for o in outcomes)
    # n requests offered at ``rate`` take n / rate seconds on average, so goodput is the
    # offered rate times the share that met the targets (exact for the scaled trace window).
    offered = n / offered_rate
    span = makespan if math.isfinite(makespan) and makespan > 0 else offered
    return Summary(
        offered_rate=offered_rate,
        requests=n,
        completed=len(done),
        completed_rps=len(done) / span,
        output_tps=tokens / span,
        ttft_p50=_finite(quantile(ttfts, 0.50)),
        ttft_p99=_finite(quantile(ttfts, 0.99)),
        ttft_p99_finished=_finite(quantile([o.ttft for o in done if o.ttft is not None], 0.99)),
        tpot_p50=_finite(quantile(tpots, 0.50)),
        tpot_p99=_finite(quantile(tpots, 0.99)),
        e2e_p99=_finite(quantile(e2es, 0.99)),
        attainment=met / n,
        goodput=met / offered,
        cpu_request_share=sum(o.cpu_tokens > 0 or o.route == "cpu" for o in outcomes) / n,
        cpu_token_share=cpu_tokens / tokens if tokens else 0.0,
        gpu_util=min(1.0, gpu_busy / span),
        cpu_util=min(1.0, cpu_busy / span),
        makespan=span,
        rejected=sum(o.outcome == "rejected" for o in outcomes),
        timed_out=sum(o.outcome == "timeout" for o in outcomes),
        gpu_preemptions=gpu_preemptions,
        by_class=by_class(outcomes, offered, ttft_target, tpot_target),
    )


def by_class(outcomes: Sequence[Outcome], offered: float, ttft_target: float, tpot_target: float
             ) -> dict[str, dict[str, object]]:
    """Per class: its requests, how many finished and met its targets, its goodput over the
    run's window (``offered`` seconds), and its refusals by reason."""
    out: dict[str, dict[str, object]] = {}
    for name in sorted({o.level for o in outcomes}):
        mine = [o for o in outcomes if o.level == name]
        met = sum(o.meets(ttft_target, tpot_target) for o in mine)
        refusals: dict[str, int] = {}
        for o in mine:
            if o.refusal:
                refusals[o.refusal] = refusals.get(o.refusal, 0) + 1
        finished = [o.ttft for o in mine if o.e2e is not None and o.ttft is not None]
        out[name] = {
            "requests": len(mine), "completed": sum(o.e2e is not None for o in mine), "met": met,
            "attainment": met / len(mine), "goodput": met / offered,
            "ttft_p99_finished": _finite(quantile(finished, 0.99)) if finished else None,
            "cpu_request_share": sum(o.cpu_tokens > 0 or o.route == "cpu" for o in mine) / len(mine),
            "refusals": dict(sorted(refusals.items())),
        }
    return out
