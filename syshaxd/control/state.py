"""Builds the control API's :class:`~syshaxd.schema.StateModel` from the daemon's parts.

Pure: a snapshot, the conductor's counters and the runtime config in, a wire model out.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from syshaxd import __version__
from syshaxd.config import RuntimeConfig
from syshaxd.routing import Limits
from syshaxd.schema import (
    ConductorStatsModel,
    DecisionModel,
    EngineStateModel,
    GpuModel,
    HostModel,
    MemoryModel,
    NumaNodeModel,
    StateModel,
)
from syshaxd.snapshot import EngineView, HostView, Snapshot


def batch_limit(device: str, limits: Limits) -> int:
    """The decider's running-request limit for a device's engines."""
    if device == "gpu":
        return limits.gpu_max_batch_size or limits.max_num_seqs
    return limits.cpu_max_batch_size


def engine_state(view: EngineView, runtime: RuntimeConfig, limits: Limits) -> EngineStateModel:
    """One engine for the console; the flags come from the runtime config (freshest)."""
    enabled, draining = runtime.engine_flags(view.name)
    m = view.metrics
    return EngineStateModel(
        name=view.name,
        device=view.device,
        url=view.url,
        dialect=view.dialect,
        state=view.state.value,
        last_error=view.last_error,
        scraped_at=view.scraped_at,
        enabled=enabled,
        draining=draining,
        kv_cache_usage=m.kv_cache_usage,
        cpu_swap_usage=m.cpu_swap_usage,
        running=m.running,
        waiting=m.waiting,
        swapped=m.swapped,
        preemptions_total=m.preemptions_total,
        prefill_tps=m.prefill_tps,
        decode_tps=m.decode_tps,
        prefill_speed=m.prefill_speed,
        batch_limit=batch_limit(view.device, limits),
        inflight=view.inflight,
        scheduled=view.scheduled,
    )


def host_model(host: HostView, bound_cpus: Sequence[int] = ()) -> HostModel:
    """The host part; ``bound_cpus`` fills in when the snapshot does not know the binding."""
    return HostModel(
        cpu_percent=list(host.cpu_percent),
        numa_nodes=[
            NumaNodeModel(id=n.id, cpus=list(n.cpus), mem_total=n.mem_total, mem_free=n.mem_free)
            for n in host.numa_nodes
        ],
        mem_total=host.mem_total,
        mem_used=host.mem_used,
        gpus=[
            GpuModel(index=g.index, name=g.name, utilization=g.utilization, mem_used=g.mem_used, mem_total=g.mem_total)
            for g in host.gpus
        ],
        bound_cpus=list(host.bound_cpus or bound_cpus),
    )


def build_state(
    *,
    snapshot: Snapshot,
    stats: ConductorStatsModel,
    decisions: Sequence[DecisionModel],
    runtime: RuntimeConfig,
    started_monotonic: float,
    bound_cpus: Sequence[int] = (),
    events_dropped: int = 0,
    memory: MemoryModel | None = None,
) -> StateModel:
    """Everything ``GET /v1/state`` returns."""
    limits = runtime.limits()
    return StateModel(
        version=__version__,
        uptime=max(0.0, time.monotonic() - started_monotonic),
        time=time.time(),
        engines=[engine_state(view, runtime, limits) for view in snapshot.engines],
        conductor=stats,
        host=host_model(snapshot.host, bound_cpus),
        config=runtime.values(),
        config_sources=runtime.sources(),
        recent_decisions=list(decisions),
        events_dropped=events_dropped,
        memory=memory or MemoryModel(),
    )
