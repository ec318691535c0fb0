"""``classic``: the sysHAX scheduling rules, in sysHAX's order.

1. A request that carries ``num_decode_tokens`` (a continuation) goes to the CPU.
2. GPU side: the GPU is full when its running plus scheduled-not-yet-running count reaches
   ``gpu_max_batch_size`` (unset: ``max_num_seqs``, as sysHAX 0.2); when no
   ``gpu_max_batch_size`` is set, also when it has both running and waiting requests; or
   when its KV-cache usage passes ``gpu_cache_threshold`` percent. Otherwise the GPU —
   unless the CPU also has room and decodes faster per request (later sysHAX's per-batch
   throughput comparison, made only when both devices are decoding).
3. CPU side: no capacity (queue) when the CPU's decode throughput is below
   ``cpu_throughput_threshold`` while it is busy, or when its running plus scheduled count
   reaches ``cpu_max_batch_size``; otherwise the CPU with the token limit
   ``clamp(round(tps * token_limit_multiplier, -1), token_limit_min, token_limit_max)``.
   ``auto_pd_offload`` turns that CPU decision into GPU prefill + CPU decode.

sysHAX's own fragment compares the CPU's running count plus the *GPU's* scheduled count
with the CPU limit; we use the CPU's scheduled count, which is what the limit is about.
"""

from __future__ import annotations

from syshaxd.policy.common import busy, cpu_token_limit, pick_engine
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineView, Snapshot


def gpu_full(gpu: EngineView | None, limits: Limits) -> str | None:
    """Why the GPU takes no more work under the classic rules, or None when it has room."""
    if gpu is None:
        return "no usable GPU engine"
    limit = limits.gpu_max_batch_size if limits.gpu_max_batch_size is not None else limits.max_num_seqs
    load = busy(gpu)
    if load >= limit:
        return f"gpu running+scheduled {load} >= batch limit {limit}"
    if limits.gpu_max_batch_size is None and gpu.running > 0 and gpu.waiting > 0:
        return f"gpu has {gpu.running} running and {gpu.waiting} waiting"
    kv = gpu.metrics.kv_cache_usage
    if kv is not None and kv * 100.0 > limits.gpu_cache_threshold:
        return f"gpu KV cache {kv * 100.0:.1f}% > {limits.gpu_cache_threshold:g}%"
    return None


def cpu_full(cpu: EngineView | None, limits: Limits) -> str | None:
    """Why the CPU takes no more work under the classic rules, or None when it has room."""
    if cpu is None:
        return "no usable CPU engine"
    load = busy(cpu)
    tps = cpu.metrics.decode_tps
    if tps is not None and tps < limits.cpu_throughput_threshold and load > 0:
        return f"cpu decode {tps:.2f} tok/s < {limits.cpu_throughput_threshold:g} while busy ({load})"
    if load >= limits.cpu_max_batch_size:
        return f"cpu running+scheduled {load} >= cpu batch limit {limits.cpu_max_batch_size}"
    return None


def _per_request_tps(view: EngineView) -> float | None:
    tps, running = view.metrics.decode_tps, view.metrics.running
    if tps is None or tps <= 0 or not running:
        return None
    return tps / running


def _cpu_decodes_faster(gpu: EngineView, cpu: EngineView | None, limits: Limits) -> str | None:
    """Later sysHAX: with room on both, the device decoding faster per request wins."""
    gpu_tps = _per_request_tps(gpu)
    cpu_tps = _per_request_tps(cpu) if cpu is not None else None
    if gpu_tps is None or cpu_tps is None or cpu_tps <= gpu_tps or cpu_full(cpu, limits) is not None:
        return None
    return f"cpu decodes faster per request ({cpu_tps:.1f} > {gpu_tps:.1f} tok/s)"


def _to_cpu(
    cpu: EngineView | None, gpu: EngineView | None, limits: Limits, why: str, *, split: bool
) -> Decision:
    full = cpu_full(cpu, limits)
    if full is not None or cpu is None:
        return Decision(None, Mode.WHOLE, None, f"no capacity: {why}; {full}")
    limit = cpu_token_limit(cpu.metrics.decode_tps, limits)
    if split:
        if gpu is None:
            return Decision(None, Mode.PD_SPLIT, None, f"no capacity: {why}; no usable GPU for the prefill")
        return Decision("cpu", Mode.PD_SPLIT, limit, f"pd_split: {why}; gpu prefill, cpu decode {limit} tokens", engine=cpu.name)
    return Decision("cpu", Mode.WHOLE, limit, f"cpu: {why}; token limit {limit}", engine=cpu.name)


def classic(snapshot: Snapshot, request: RequestFeatures, limits: Limits) -> Decision:
    """Decide as sysHAX does (see the module docstring for the rules)."""
    gpu = pick_engine(snapshot, "gpu")
    cpu = pick_engine(snapshot, "cpu")
    if request.forced_mode is Mode.PD_SPLIT:
        return _to_cpu(cpu, gpu, limits, "pd_split requested", split=True)
    if request.has_num_decode_tokens:
        return _to_cpu(cpu, gpu, limits, "request carries num_decode_tokens", split=False)
    why = gpu_full(gpu, limits)
    if why is None and gpu is not None:
        faster = _cpu_decodes_faster(gpu, cpu, limits)
        if faster is None:
            return Decision("gpu", Mode.WHOLE, None, f"gpu: {busy(gpu)} running+scheduled, room left", engine=gpu.name)
        why = faster
    else:
        why = f"gpu full: {why}"
    return _to_cpu(cpu, gpu, limits, why, split=limits.auto_pd_offload and gpu is not None)
