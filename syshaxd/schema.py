"""The control API's wire schema: one set of pydantic models for the daemon's responses
and the console's parsing.

Imports neither FastAPI nor Textual, so both sides can use it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Wire(BaseModel):
    # The console must keep working against a newer daemon that adds fields.
    model_config = ConfigDict(extra="ignore", frozen=True)


class EngineStateModel(_Wire):
    """One engine as the console shows it."""

    name: str
    device: Literal["gpu", "cpu"]
    url: str
    dialect: str
    state: Literal["unknown", "up", "stale", "down"]
    last_error: str | None = None
    scraped_at: float | None = None
    enabled: bool = True
    draining: bool = False
    kv_cache_usage: float | None = None  # 0..1
    cpu_swap_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    preemptions_total: float | None = None
    prefill_tps: float | None = None
    decode_tps: float | None = None
    #: Prompt tokens per second of prefill time, measured (capacity; prefill_tps is demand).
    prefill_speed: float | None = None
    batch_limit: int | None = None  # the decider's limit for this engine's device
    inflight: int = 0  # the conductor's own count
    scheduled: int = 0


class DecisionModel(_Wire):
    """One routing decision, as recorded for the log and the console."""

    time: float
    request_id: str
    device: Literal["gpu", "cpu"] | None
    mode: Literal["whole", "pd_split"]
    engine: str | None = None
    reason: str
    policy: str
    token_limit: int | None = None
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    est_ttft: float | None = None
    est_e2e: float | None = None
    #: Why it waited in line before this decision (the policy's reason when it held it, or the
    #: line ahead of it); None when it was placed on arrival.
    held: str | None = None
    service_class: str | None = None  # the class it runs in
    # Filled in when the request ends (decision events are sent at routing time):
    outcome: str | None = None
    ttft: float | None = None
    e2e: float | None = None


class EngineInputModel(_Wire):
    """One engine as the policy saw it when it decided a request (the scrape merged with the
    conductor's own counts)."""

    name: str
    device: Literal["gpu", "cpu"]
    state: str
    usable: bool
    running: int
    waiting: int
    inflight: int
    kv_cache_usage: float | None = None  # 0..1
    tpot_recent: float | None = None  # seconds per output token, recent
    ttft_recent: float | None = None
    prefill_speed: float | None = None  # prompt tokens/s of prefill time, measured


class RequestRecordModel(_Wire):
    """One finished request as the daemon keeps it (``GET /v1/requests``, the console's
    requests view, ``syshax advise``): when it came, how big it was, the decision and its
    inputs, what happened. Never prompt text."""

    request_id: str
    arrival: float  # time.time() when the request arrived
    kind: str  # chat, completion
    stream: bool
    prompt_tokens: int  # the engine's count, or syshaxd's estimate (prompt_tokens_source says which)
    max_tokens: int
    output_tokens: int | None = None  # None when not known (output_tokens_source says where it came from)
    outcome: str
    decision: DecisionModel | None = None  # None: never routed (refused, timed out waiting)
    inputs: list[EngineInputModel] = Field(default_factory=list)
    limits: dict[str, Any] = Field(default_factory=dict)  # the decider's settings at that moment
    queued: float | None = None  # seconds from arrival to the decision
    ttft: float | None = None
    tpot: float | None = None  # (last token - first token written to the client) / (output_tokens - 1)
    e2e: float
    service_class: str | None = None  # the class it ran in
    ttft_target: float | None = None  # its own targets (the class's, or its headers'), seconds
    tpot_target: float | None = None
    met: bool | None = None  # answered whole within both targets (None: not answered)
    #: What it cost (docs/service-levels.md): its share of each engine's time while the engine
    #: held it (an engine-second split among the requests it held), in GPU-seconds and in
    #: CPU-core-seconds.
    gpu_seconds: float | None = None
    cpu_core_seconds: float | None = None
    #: Where output_tokens came from: "usage" (the engine's), "timings" (llama-server's),
    #: "counted" (the deltas the client got); None when unknown.
    output_tokens_source: str | None = None
    prompt_tokens_source: str = "estimate"  # "usage", "timings", or "estimate" (syshaxd's own)
    #: The choices it asked for (``n``): output_tokens is their sum, at most choices x max_tokens;
    #: tpot is the longest choice's (they decode side by side).
    choices: int = 1
    api_key_name: str | None = None  # the name of the API key it came with (never the secret); None: no keys
    #: The reason syshaxd refused it (its x-syshax-refused-reason: queue_full, shed, ...); a
    #: request with a decision and ``shed`` gave up its GPU slot before its first byte.
    refused: str | None = None


class AdviceClass(_Wire):
    """One service class's share of a window, replayed or as it happened: each request judged
    at its own targets."""

    requests: int = 0
    completed: int = 0
    met: int = 0  # finished within its own TTFT and TPOT targets
    goodput: float = 0.0  # met per second of the window (the option's span, as its total goodput)
    ttft_p99: float | None = None  # seconds, of its completed requests
    refused: int = 0  # never answered: refused (queue full, shed, late, ...) or timed out
    #: Where its completed requests ran: whole on the GPU, whole on the CPU, or split (GPU
    #: prefill, CPU decode); shares of ``completed``.
    gpu_share: float = 0.0
    cpu_share: float = 0.0
    split_share: float = 0.0


class AdviceClassTargets(_Wire):
    """A class of the window as the daemon's class table gives it (targets in seconds)."""

    ttft: float | None = None  # its requests' TTFT target (the most common one, headers included)
    tpot: float | None = None
    priority: int = 0
    cpu: bool = True  # whether the table lets the policy place it on the CPU


class AdviceOption(_Wire):
    """One setting ``syshax advise`` replayed the recorded window under, and what it predicts."""

    label: str  # for people: "adaptive, cpu batch 20, auto-PD off"
    settings: dict[str, Any] = Field(default_factory=dict)  # dotted runtime keys -> values (PATCH /v1/config)
    goodput: float  # predicted requests/s meeting the TTFT and TPOT targets
    throughput: float  # predicted finished requests/s
    ttft_p50: float | None = None  # seconds
    ttft_p99: float | None = None
    tpot_p99: float | None = None
    tpot_p50: float | None = None
    output_tps: float | None = None  # predicted output tokens/s
    cpu_share: float = 0.0  # share of requests the CPU served (whole or decode)
    current: bool = False  # the daemon's setting when the window was recorded
    tied: bool = False  # differs from the recommendation only within advise's own error
    classes: dict[str, AdviceClass] = Field(default_factory=dict)  # per service class of the window


class AdviceModel(_Wire):
    """The latest advice (``POST``/``GET /v1/advice``; the console shows it): the recorded
    window replayed in virtual time under each option."""

    made_at: float  # time.time()
    requests: int  # in the replayed window
    window_s: float  # its length
    profiles: dict[str, str] = Field(default_factory=dict)  # device -> profile used (calibrated file or name)
    options: list[AdviceOption] = Field(default_factory=list)
    #: The current setting's prediction against what really happened in the same window:
    #: relative errors, e.g. {"ttft_p50": 0.08, "throughput": -0.03}.
    current_error: dict[str, float] = Field(default_factory=dict)
    recommended: int | None = None  # index into options
    summary: str = ""  # one sentence for people
    #: Why advise recommends nothing (its error over the bound, a window too short or thin,
    #: profiles not of these engines); None when it advises.
    refused: str | None = None
    error_bound: float | None = None  # the largest self-check error advise accepts (0.5: 50%)
    forced: bool = False  # advised although refused (``--force``)
    #: The window's service classes (their targets, priority, whether the CPU may serve them)
    #: and what really happened to each.
    classes: dict[str, AdviceClassTargets] = Field(default_factory=dict)
    actual_classes: dict[str, AdviceClass] = Field(default_factory=dict)
    #: The classes the CPU should serve on this box (empty: none); None when advise recommends nothing.
    cpu_classes: list[str] | None = None
    cpu_verdict: str = ""  # which class the CPU should serve, in one sentence


class ClassStatsModel(_Wire):
    """One service class over the conductor's recent window."""

    waiting: int = 0  # in line now
    finished_per_s: float = 0.0
    goodput_per_s: float = 0.0  # answered whole within the class's own targets


class ConductorStatsModel(_Wire):
    """The conductor's own counters."""

    queue_depth: int = 0
    queue_limit: int = 0
    inflight: dict[str, int] = Field(default_factory=dict)  # per engine
    requests_total: int = 0
    requests_per_s: float = 0.0
    ttft_p50: float | None = None  # seconds, over a recent window
    ttft_p99: float | None = None
    decisions: dict[str, int] = Field(default_factory=dict)  # "gpu/whole" -> count
    reasons: dict[str, int] = Field(default_factory=dict)  # short reason -> count
    outcomes: dict[str, int] = Field(default_factory=dict)  # "ok", "error", "timeout", ...
    resubmits_total: int = 0
    #: Requests marked as ``syshax calibrate``'s probes: served, left out of the request records.
    probe_requests_total: int = 0
    decision_accuracy: float | None = None  # share of estimates within tolerance
    policy: str = ""
    auto_pd_offload: bool = False
    #: How late the daemon's event loop fires a timer, seconds, over the last minute: every
    #: request waits as long (None until measured).
    loop_lag_p99: float | None = None
    loop_lag_max: float | None = None
    #: Why the whole box is draining (``syshax drain``, SIGTERM): /health answers 503 and the
    #: daemon exits once what is in flight has finished. None while it serves normally.
    box_draining: str | None = None
    #: Per service class: the line now and the recent finished and good requests per second.
    classes: dict[str, ClassStatsModel] = Field(default_factory=dict)


class NumaNodeModel(_Wire):
    """A NUMA node with its CPUs."""

    id: int
    cpus: list[int]
    mem_total: int | None = None
    mem_free: int | None = None


class GpuModel(_Wire):
    """A GPU (NVML)."""

    index: int
    name: str
    utilization: float
    mem_used: int
    mem_total: int


class HostModel(_Wire):
    """Host utilisation."""

    cpu_percent: list[float] = Field(default_factory=list)
    numa_nodes: list[NumaNodeModel] = Field(default_factory=list)
    mem_total: int = 0
    mem_used: int = 0
    gpus: list[GpuModel] = Field(default_factory=list)
    bound_cpus: list[int] = Field(default_factory=list)  # the CPU engine's binding


class MemoryModel(_Wire):
    """The daemon's own memory."""

    rss: int | None = None  # bytes now
    rss_start: int | None = None  # bytes when first ready


class StateModel(_Wire):
    """GET /v1/state: everything the console shows."""

    version: str
    uptime: float
    time: float
    engines: list[EngineStateModel] = Field(default_factory=list)
    conductor: ConductorStatsModel = Field(default_factory=ConductorStatsModel)
    host: HostModel = Field(default_factory=HostModel)
    config: dict[str, Any] = Field(default_factory=dict)  # runtime keys -> value
    config_sources: dict[str, str] = Field(default_factory=dict)  # key -> "default", "file ...", ...
    recent_decisions: list[DecisionModel] = Field(default_factory=list)
    events_dropped: int = 0
    memory: MemoryModel = Field(default_factory=MemoryModel)


class ConfigChangeModel(_Wire):
    """A ``config`` event and the answer to PATCH /v1/config and POST /v1/reload."""

    changed: dict[str, Any] = Field(default_factory=dict)  # key -> new value
    engines: dict[str, dict[str, bool]] = Field(default_factory=dict)  # name -> {enabled, draining}
    needs_restart: list[str] = Field(default_factory=list)
    source: str = "patch"  # patch, reload, save
    path: str | None = None  # save: the overrides file written


#: PATCH /v1/config takes a flat JSON object of dotted keys: runtime config keys
#: (``"decider.cpu_max_batch_size": 24``) and engine flags
#: (``"engines.cpu0.draining": true``, ``"engines.gpu0.enabled": false``). All or nothing.
PatchBody = dict[str, Any]


class ErrorModel(_Wire):
    """An error answer of the control API."""

    error: str
    key: str | None = None


def duration(seconds: float | None, missing: str = "-") -> str:
    """A duration as an operator reads it: milliseconds below a second, seconds above
    (``"3.2 ms"``, ``"850 ms"``, ``"1.25 s"``); ``missing`` for None."""
    if seconds is None:
        return missing
    ms = seconds * 1000
    if abs(ms) < 10:
        return f"{ms:.1f} ms"
    if abs(seconds) < 1:
        return f"{ms:.0f} ms"
    return f"{seconds:,.2f} s"
