"""Immutable views of what the daemon sees: engines, host, and the whole timestamped Snapshot.

Pure data, no I/O: the monitor produces these, policies and the control API read them,
and the virtual-time simulator builds them too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

Device = Literal["gpu", "cpu"]


class EngineState(str, enum.Enum):
    """Health of an engine as seen by its scrapes."""

    UNKNOWN = "unknown"  # not scraped yet
    UP = "up"
    STALE = "stale"  # missed a few scrapes: numbers are old
    DOWN = "down"  # missed many scrapes or refuses connections


@dataclass(frozen=True)
class HistogramData:
    """A Prometheus histogram summed over its series: cumulative buckets, count and sum."""

    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), +Inf last
    count: float
    sum: float

    def quantile(self, q: float) -> float | None:
        """Estimate a quantile by linear interpolation inside the bucket (as PromQL does)."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        prev_bound, prev_count = 0.0, 0.0
        for bound, cum in self.buckets:
            if cum >= rank:
                if bound == float("inf"):
                    return prev_bound
                span = cum - prev_count
                frac = (rank - prev_count) / span if span > 0 else 1.0
                return prev_bound + (bound - prev_bound) * frac
            prev_bound, prev_count = bound, cum
        return prev_bound


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's numbers in the common record every dialect produces.

    ``None`` means the engine does not report the quantity (not zero).
    """

    kv_cache_usage: float | None = None  # 0..1
    cpu_swap_usage: float | None = None  # 0..1 (vLLM v0 swap space)
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    #: Output tokens running requests have produced so far but the counter does not hold yet
    #: (llama.cpp counts a request's tokens only when it ends; its /slots shows them live).
    generation_tokens_running: int | None = None
    prefill_tps: float | None = None  # tokens/s: a gauge from the engine, or a counter rate
    decode_tps: float | None = None
    histograms: tuple[tuple[str, HistogramData], ...] = ()
    requests_finished_total: float | None = None
    #: Seconds the engine has spent prefilling prompts (llama.cpp's ``prompt_seconds_total``;
    #: vLLM's per-request prefill-time histogram sum, which counts a step shared by several
    #: prompts once per prompt, so a speed from it is a lower bound).
    prefill_seconds_total: float | None = None
    # Filled by the monitor's rate tracker from counter deltas over its window:
    finish_rate: float | None = None  # requests finished per second
    tpot_recent: float | None = None  # mean seconds per output token of recent tokens, per request
    tpot_batch: float | None = None  # mean number of requests decoding while tpot_recent was measured
    ttft_recent: float | None = None  # mean time to first token of recently started requests
    #: Prompt tokens per second of prefill time (capacity, unlike ``prefill_tps``, which is
    #: demand): prompt tokens over prefill seconds in the latency window, kept while idle.
    prefill_speed: float | None = None
    #: Tokens the engine's KV cache holds in all (vLLM: num_gpu_blocks x block_size of its
    #: cache_config_info), when known: lets a policy turn prompt lengths into KV headroom.
    kv_capacity_tokens: int | None = None

    def histogram(self, name: str) -> HistogramData | None:
        """The named histogram (common names: ttft, tpot, e2e), if the engine has it."""
        for key, value in self.histograms:
            if key == name:
                return value
        return None


@dataclass(frozen=True)
class EngineView:
    """Everything known about one engine at one moment."""

    name: str
    device: Device
    url: str
    dialect: str
    state: EngineState = EngineState.UNKNOWN
    last_error: str | None = None
    scraped_at: float | None = None  # time.time() of the last good scrape
    metrics: EngineMetrics = field(default_factory=EngineMetrics)
    enabled: bool = True
    draining: bool = False
    # The conductor's own accounting, fresher than any scrape:
    inflight: int = 0  # routed to this engine and not finished
    scheduled: int = 0  # routed but not yet producing tokens (not visible as running yet)
    inflight_decode_tokens: int = 0  # output tokens the in-flight requests may still generate
    scheduled_prompt_tokens: int = 0  # prompt tokens of the scheduled requests (prefill to come)
    #: Each answer the engine has started: (seconds since its first token, its max_tokens).
    answers: tuple[tuple[float, int], ...] = ()
    #: The tightest TPOT target (seconds) the requests placed here and not finished were placed
    #: under (each its class's, or the decider's); None when none is placed here.
    tightest_tpot: float | None = None

    @property
    def usable(self) -> bool:
        """Whether new requests may be routed here."""
        # UNKNOWN (not scraped yet) counts as usable: a failed connection is resubmitted anyway,
        # and refusing everything until the first scrape would fail requests at startup.
        return self.enabled and not self.draining and self.state is not EngineState.DOWN

    @property
    def running(self) -> int:
        """Requests running on the engine: the scrape, or the conductor's count if higher."""
        scraped = self.metrics.running or 0
        return max(scraped, self.inflight - self.scheduled)

    @property
    def waiting(self) -> int:
        """Requests queued inside the engine."""
        return self.metrics.waiting or 0


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node and its online CPUs."""

    id: int
    cpus: tuple[int, ...]
    mem_total: int | None = None  # bytes
    mem_free: int | None = None


@dataclass(frozen=True)
class GpuView:
    """One GPU as NVML reports it."""

    index: int
    name: str
    utilization: float  # 0..1
    mem_used: int
    mem_total: int


@dataclass(frozen=True)
class HostView:
    """The host: per-core CPU use, NUMA layout, memory, GPUs."""

    cpu_percent: tuple[float, ...] = ()  # per logical CPU, 0..100, index = CPU id
    numa_nodes: tuple[NumaNode, ...] = ()
    mem_total: int = 0
    mem_used: int = 0
    gpus: tuple[GpuView, ...] = ()
    bound_cpus: tuple[int, ...] = ()  # the CPU engine's binding, when known


@dataclass(frozen=True)
class Snapshot:
    """One immutable, timestamped picture of engines and host."""

    taken_at: float
    engines: tuple[EngineView, ...] = ()
    host: HostView = field(default_factory=HostView)

    def on(self, device: Device) -> tuple[EngineView, ...]:
        """The engines of one device."""
        return tuple(e for e in self.engines if e.device == device)

    def usable(self, device: Device) -> tuple[EngineView, ...]:
        """The engines of one device that may take new requests."""
        return tuple(e for e in self.engines if e.device == device and e.usable)

    def engine(self, name: str) -> EngineView | None:
        """An engine by name."""
        for e in self.engines:
            if e.name == name:
                return e
        return None
