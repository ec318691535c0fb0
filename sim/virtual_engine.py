"""One simulated engine of a virtual-time run, as the runner's conductor sees it.

An engine is its model core plus what the live daemon would know about it: the metrics
of the monitor's last scrape (rates through the monitor's own RateTracker, TTFT and TPOT
as histogram sums), the conductor's ``inflight``/``scheduled`` counts, and the step it has
computed but whose end the clock has not reached yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.core import EngineCore, StepResult
from sim.profile import Profile
from syshaxd.engines.rates import RateTracker
from syshaxd.snapshot import Device, EngineMetrics, EngineState, EngineView, HistogramData


@dataclass(frozen=True)
class EngineSpec:
    """One simulated engine of a run."""

    name: str
    device: Device
    profile: Profile
    max_num_seqs: int | None = None


@dataclass
class VirtualEngine:
    """A run's engine: its core, last scraped metrics and the conductor's counts."""

    spec: EngineSpec
    core: EngineCore
    rates: RateTracker
    metrics: EngineMetrics = field(default_factory=EngineMetrics)
    inflight: int = 0
    scheduled: int = 0
    pending: StepResult | None = None
    stalled: bool = False  # queued work that cannot start until something changes
    ttft: list[float] = field(default_factory=lambda: [0.0, 0.0])  # count, sum
    tpot: list[float] = field(default_factory=lambda: [0.0, 0.0])
    last_token: dict[str, float] = field(default_factory=dict)

    @classmethod
    def new(cls, spec: EngineSpec, rate_window: float, latency_window: float) -> VirtualEngine:
        """An idle engine with an empty core, its rates taken over ``rate_window`` seconds (its
        TPOT/TTFT means over ``latency_window``)."""
        return cls(spec, EngineCore(spec.profile, max_num_seqs=spec.max_num_seqs),
                   RateTracker(rate_window, latency_window))

    def next_time(self) -> float:
        """When this engine next has something to report or compute (inf: nothing until poked)."""
        if self.pending is not None:
            return self.pending.end
        if self.stalled:
            return math.inf
        t = self.core.next_event_time()
        return math.inf if t is None else t

    def scrape(self, now: float) -> None:
        """Take the core's counters as the monitor's scrape at ``now`` would."""
        c = self.core.counters
        raw = EngineMetrics(
            kv_cache_usage=self.core.kv_usage, running=self.core.num_running, waiting=self.core.num_waiting,
            swapped=self.core.num_swapped, preemptions_total=float(c.preemptions),
            prompt_tokens_total=float(c.prompt_tokens), generation_tokens_total=float(c.generation_tokens),
            requests_finished_total=float(sum(c.finished.values())), prefill_seconds_total=c.prefill_time,
            histograms=(("ttft", HistogramData((), self.ttft[0], self.ttft[1])),
                        ("tpot", HistogramData((), self.tpot[0], self.tpot[1]))),
        )
        self.metrics = self.rates.update(raw, now)

    def view(self) -> EngineView:
        """The engine as a policy sees it in a snapshot."""
        return EngineView(self.spec.name, self.spec.device, f"sim://{self.spec.name}", "vllm-v1",
                          state=EngineState.UP, metrics=self.metrics, inflight=self.inflight, scheduled=self.scheduled)
