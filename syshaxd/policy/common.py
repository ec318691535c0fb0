"""Helpers every policy uses: choosing an engine of a device, the CPU token limit."""

from __future__ import annotations

import math

from syshaxd.routing import Limits
from syshaxd.snapshot import Device, EngineView, Snapshot


def engine_load(view: EngineView) -> tuple[int, float, str]:
    """Sort key of an engine's load: requests it holds or will hold, then KV use, then name."""
    return (view.running + view.scheduled + view.waiting, view.metrics.kv_cache_usage or 0.0, view.name)


def pick_engine(snapshot: Snapshot, device: Device) -> EngineView | None:
    """The least loaded usable engine of a device, or None when none may take requests."""
    usable = snapshot.usable(device)
    return min(usable, key=engine_load) if usable else None


def cpu_token_limit(cpu_tokens_per_s: float | None, limits: Limits) -> int:
    """sysHAX's CPU token limit: ``clamp(round(tps * multiplier, -1), min, max)``.

    Python's ``round`` sends a half to the even ten (25 -> 20, 35 -> 40), as sysHAX does.
    An unknown or negative throughput counts as 0 (the limit is then ``token_limit_min``).
    """
    tps = cpu_tokens_per_s if cpu_tokens_per_s is not None and cpu_tokens_per_s > 0 else 0.0
    scaled = tps * limits.token_limit_multiplier
    if not math.isfinite(scaled):
        return limits.token_limit_max
    raw = int(round(scaled, -1))
    return max(limits.token_limit_min, min(limits.token_limit_max, raw))


def busy(view: EngineView) -> int:
    """Requests an engine runs plus those the conductor routed there that have not started."""
    return view.running + view.scheduled
