"""Building snapshots for policy tests."""

from __future__ import annotations

from dataclasses import replace

from syshaxd.snapshot import Device, EngineMetrics, EngineState, EngineView, Snapshot


def engine(
    name: str,
    device: Device,
    *,
    running: int = 0,
    waiting: int = 0,
    scheduled: int = 0,
    kv: float | None = None,
    tps: float | None = None,
    tpot: float | None = None,
    tpot_batch: float | None = None,
    prefill_tps: float | None = None,
    state: EngineState = EngineState.UP,
    enabled: bool = True,
    draining: bool = False,
    decode_tokens: int = 0,
    prompt_tokens: int = 0,
) -> EngineView:
    """An engine view as the conductor merges it: scraped numbers plus its own counts."""
    return EngineView(
        name=name,
        device=device,
        url=f"http://127.0.0.1/{name}",
        dialect="vllm-v1",
        state=state,
        metrics=EngineMetrics(
            kv_cache_usage=kv, running=running, waiting=waiting, decode_tps=tps, tpot_recent=tpot, tpot_batch=tpot_batch,
            prefill_tps=prefill_tps,
        ),
        enabled=enabled,
        draining=draining,
        inflight=running + scheduled,
        scheduled=scheduled,
        inflight_decode_tokens=decode_tokens,
        scheduled_prompt_tokens=prompt_tokens,
    )


def with_capacity(view: EngineView, tokens: int) -> EngineView:
    """The view with the engine's KV capacity in tokens known (vLLM reports it, llama.cpp does not)."""
    return replace(view, metrics=replace(view.metrics, kv_capacity_tokens=tokens))


def snap(*engines: EngineView) -> Snapshot:
    """A snapshot of the given engines."""
    return Snapshot(taken_at=1000.0, engines=tuple(engines))
