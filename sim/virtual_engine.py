"""One simulated engine of a virtual-time run, as the runner sees it.

An engine is its model core plus what the live daemon would know about it: the metrics
of the monitor's last scrape (rates through the monitor's own RateTracker, TTFT and TPOT
as histogram sums) and the step it has computed but whose end the clock has not reached
yet. :class:`RunEngine` is what the runner asks of any engine; :class:`VirtualEngine` is the
modelled one, :class:`~sim.scripted.ScriptedEngine` one whose every step a script says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

from sim import timing
from sim.core import EngineCore, SimRequest, StepResult
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


class RunEngine(Protocol):
    """What the virtual-time runner asks of an engine."""

    spec: EngineSpec
    #: A step computed whose end the clock has not reached yet.
    pending: StepResult | None

    def next_time(self) -> float:
        """When this engine next has something to report or compute (inf: nothing until poked)."""
        ...

    def compute(self, now: float, horizon: float) -> None:
        """Compute the next step, ending no later than ``horizon`` if it can (into ``pending``)."""
        ...

    def accepts(self, context: int, new: int) -> bool:
        """Whether the engine takes a request of this size."""
        ...

    def submit(self, req: SimRequest, now: float) -> None:
        """Queue a request."""
        ...

    def abort(self, rid: str) -> None:
        """Drop a request (its client left, or it timed out)."""
        ...

    def delivered(self, result: StepResult) -> None:
        """The runner delivered ``result``: count it where the engine's metrics count it."""
        ...

    def transfer_time(self, tokens: int) -> float:
        """Seconds to move ``tokens`` of KV cache into this engine."""
        ...

    def scrape(self, now: float) -> None:
        """Take the engine's metrics as the monitor's scrape at ``now`` would."""
        ...

    def view(self) -> EngineView:
        """The engine as the monitor observed it at the last scrape."""
        ...

    def startup_check(self, now: float, prompt_tokens: int, tokens: int) -> None:
        """Run the daemon's startup check's test generation from ``now``."""
        ...

    @property
    def busy_time(self) -> float:
        """Seconds the engine has spent computing."""
        ...

    @property
    def preemptions(self) -> int:
        """Requests preempted so far."""
        ...

    @property
    def clock(self) -> float:
        """How far the engine has computed (the end of its last step)."""
        ...


@dataclass
class VirtualEngine:
    """A run's engine: its core, last scraped metrics and its step in progress."""

    spec: EngineSpec
    core: EngineCore
    rates: RateTracker
    metrics: EngineMetrics = field(default_factory=EngineMetrics)
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

    def accepts(self, context: int, new: int) -> bool:
        """Whether the engine takes a request of ``context`` tokens writing ``new`` more: vLLM
        refuses one longer than its context length, or whose prompt its KV cache cannot hold."""
        profile = self.core.profile
        return context + new <= profile.max_model_len and context < profile.kv_capacity_tokens

    def next_time(self) -> float:
        """When this engine next has something to report or compute (inf: nothing until poked)."""
        if self.pending is not None:
            return self.pending.end
        if self.stalled:
            return math.inf
        t = self.core.next_event_time()
        return math.inf if t is None else t

    def compute(self, now: float, horizon: float) -> None:
        """Compute the next step, ending no later than ``horizon`` if it can (into ``pending``)."""
        if not self.core.running:
            self.core.now = max(self.core.now, now)  # idle time passed
        self.pending = self.core.advance(max(horizon, self.core.now))
        self.stalled = self.pending is None

    def submit(self, req: SimRequest, now: float) -> None:
        """Queue a request now."""
        self.core.submit(req, at=now)
        self.stalled = False

    def abort(self, rid: str) -> None:
        """Drop a request; its freed blocks may let queued work start."""
        self.core.abort(rid)
        self.stalled = False

    def delivered(self, result: StepResult) -> None:
        """Count a delivered step's first tokens and decode tokens in the TTFT and TPOT histograms."""
        per_step = (result.end - result.start) / max(1, result.steps)
        last, decoded = self.last_token, 0
        for seq, n in result.tokens:
            if seq.rid in last:
                decoded += n
            else:
                self.ttft[0] += 1
                self.ttft[1] += result.end - seq.arrival
                last[seq.rid] = result.end
        self.tpot[0] += decoded
        self.tpot[1] += per_step * decoded
        for seq in result.finished:
            last.pop(seq.rid, None)

    def transfer_time(self, tokens: int) -> float:
        """Seconds to move ``tokens`` of KV cache into this engine (:func:`sim.timing.transfer_time`)."""
        return timing.transfer_time(self.core.profile, tokens)

    def startup_check(self, now: float, prompt_tokens: int, tokens: int) -> None:
        """The daemon's startup check: one short test generation from ``now``."""
        self.core.now = now
        self.core.submit(SimRequest(f"startup.{self.spec.name}", prompt_tokens, tokens), at=now)

    @property
    def busy_time(self) -> float:
        """Seconds the core has spent computing."""
        return self.core.counters.busy_time

    @property
    def preemptions(self) -> int:
        """Requests the core preempted."""
        return self.core.counters.preemptions

    @property
    def clock(self) -> float:
        """How far the core has computed."""
        return self.core.now

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
        """The engine as the monitor observed it (with its KV capacity, as vLLM reports it)."""
        metrics = replace(self.metrics, kv_capacity_tokens=self.core.profile.kv_capacity_tokens)
        return EngineView(self.spec.name, self.spec.device, f"sim://{self.spec.name}", "vllm-v1",
                          state=EngineState.UP, metrics=metrics)
