"""The console's pure core: derived values, config patches, history buffers, core folding.

Frozen dataclasses and functions of the wire schema only: no Textual, no I/O, so every
rule the console applies (what ``+`` sends, where core 137 is drawn) is table-testable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from syshaxd.schema import (
    ConfigChangeModel,
    EngineStateModel,
    HostModel,
    PatchBody,
    StateModel,
)

Device = Literal["gpu", "cpu"]
DEVICES: tuple[Device, Device] = ("gpu", "cpu")

# Runtime config keys the console reads and writes (all in syshaxd.config.RUNTIME_KEYS).
POLICY = "decider.policy"
AUTO_PD = "decider.auto_pd_offload"
GPU_BATCH = "decider.gpu_max_batch_size"
MAX_NUM_SEQS = "decider.max_num_seqs"
CPU_BATCH = "decider.cpu_max_batch_size"
GPU_CACHE_THRESHOLD = "decider.gpu_cache_threshold"

#: The order ``P`` cycles through.
POLICIES: tuple[str, ...] = ("adaptive", "classic", "gpu-only", "gpu-priority", "cpu-only", "round-robin")


# ---------------------------------------------------------------------------------------
# Derived values and the patches hotkeys send


def engines_of(state: StateModel | None, device: Device) -> tuple[EngineStateModel, ...]:
    """The engines of one device, in the daemon's order."""
    if state is None:
        return ()
    return tuple(e for e in state.engines if e.device == device)


def batch_limit(config: Mapping[str, Any], device: Device) -> int | None:
    """The batch limit in force for a device (the GPU falls back to ``max_num_seqs``)."""
    if device == "gpu":
        value = config.get(GPU_BATCH)
        if value is None:
            value = config.get(MAX_NUM_SEQS)
    else:
        value = config.get(CPU_BATCH)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def batch_patch(config: Mapping[str, Any], device: Device, delta: int) -> PatchBody | None:
    """The PATCH that moves a device's batch limit by ``delta`` (None: the limit is unknown).

    Bounds are not checked here: the daemon validates every value and its refusal, with
    its reason, is what the operator should see.
    """
    current = batch_limit(config, device)
    if current is None:
        return None
    return {GPU_BATCH if device == "gpu" else CPU_BATCH: current + delta}


def auto_pd_patch(config: Mapping[str, Any]) -> PatchBody:
    """The PATCH that flips ``auto_pd_offload``."""
    return {AUTO_PD: not bool(config.get(AUTO_PD, False))}


def next_policy(current: str | None) -> str:
    """The policy after ``current`` in the cycle (an unknown one restarts the cycle)."""
    if current not in POLICIES:
        return POLICIES[0]
    return POLICIES[(POLICIES.index(current) + 1) % len(POLICIES)]


def policy_patch(config: Mapping[str, Any]) -> PatchBody:
    """The PATCH that selects the next policy."""
    current = config.get(POLICY)
    return {POLICY: next_policy(current if isinstance(current, str) else None)}


def drain_patch(engine: EngineStateModel) -> PatchBody:
    """The PATCH that drains an engine, or re-enables a draining one."""
    return {f"engines.{engine.name}.draining": not engine.draining}


def kv_threshold(config: Mapping[str, Any], device: Device) -> float | None:
    """The KV-cache threshold of a device as a 0..1 fraction (only the GPU has one)."""
    if device != "gpu":
        return None
    value = config.get(GPU_CACHE_THRESHOLD)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return min(1.0, max(0.0, float(value) / 100.0))


def apply_change(state: StateModel, change: ConfigChangeModel) -> StateModel:
    """The state with a confirmed config change applied (config keys and engine flags)."""
    config = {**state.config, **change.changed}
    engines = []
    for engine in state.engines:
        flags = change.engines.get(engine.name)
        if flags:
            known = {k: bool(v) for k, v in flags.items() if k in ("enabled", "draining")}
            engine = engine.model_copy(update=known)
        engines.append(engine)
    conductor = state.conductor
    updates: dict[str, Any] = {}
    if POLICY in change.changed and isinstance(change.changed[POLICY], str):
        updates["policy"] = change.changed[POLICY]
    if AUTO_PD in change.changed:
        updates["auto_pd_offload"] = bool(change.changed[AUTO_PD])
    if updates:
        conductor = conductor.model_copy(update=updates)
    return state.model_copy(update={"config": config, "engines": engines, "conductor": conductor})


def describe_change(change: ConfigChangeModel) -> str:
    """A one-line summary of a confirmed change, for a notification."""
    if change.source == "save":
        path = getattr(change, "path", None)  # newer daemons say which file they wrote
        where = f" to {path}" if path else ""
        engines = f" and the flags of {len(change.engines)} engine(s)" if change.engines else ""
        return f"saved {len(change.changed)} runtime values{engines}{where}"
    parts = [f"{key.removeprefix('decider.')} = {_show(value)}" for key, value in change.changed.items()]
    for name, flags in change.engines.items():
        parts.extend(f"{name} {flag} = {_show(value)}" for flag, value in flags.items())
    if change.needs_restart:
        parts.append("needs restart: " + ", ".join(change.needs_restart))
    if not parts:
        return "reloaded: nothing changed" if change.source == "reload" else "no change"
    return ("reloaded: " if change.source == "reload" else "") + "; ".join(parts)


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


# ---------------------------------------------------------------------------------------
# Throughput history for the sparklines


@dataclass(frozen=True)
class History:
    """Decode and prefill tokens/s per engine, sampled at most once per ``interval`` seconds."""

    interval: float = 2.0
    cap: int = 150  # 5 minutes at the default interval
    last_sample: float | None = None
    decode: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    prefill: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def push(self, state: StateModel) -> History:
        """This history with the state's rates appended, if a sample is due."""
        if self.last_sample is not None and 0 <= state.time - self.last_sample < self.interval:
            return self
        decode = dict(self.decode)
        prefill = dict(self.prefill)
        for engine in state.engines:
            decode[engine.name] = _append(decode.get(engine.name, ()), engine.decode_tps, self.cap)
            prefill[engine.name] = _append(prefill.get(engine.name, ()), engine.prefill_tps, self.cap)
        return History(self.interval, self.cap, state.time, decode, prefill)


def _append(values: tuple[float, ...], value: float | None, cap: int) -> tuple[float, ...]:
    # A missing reading draws as zero so the time axis stays regular.
    out = (*values, float(value or 0.0))
    return out[-cap:]


def resample(values: Sequence[float], width: int) -> tuple[float, ...]:
    """Fit ``values`` into ``width`` columns: the newest ``width`` values, or bucket means."""
    if width <= 0 or not values:
        return ()
    if len(values) <= width:
        return tuple(values)
    out = []
    size = len(values) / width
    for i in range(width):
        lo, hi = int(i * size), int((i + 1) * size)
        bucket = values[lo : max(hi, lo + 1)]
        out.append(sum(bucket) / len(bucket))
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Folding every core of every NUMA node into a narrow panel


@dataclass(frozen=True)
class Core:
    """One logical CPU in the heat strip."""

    cpu: int
    percent: float | None  # None: the host did not report this CPU
    bound: bool


@dataclass(frozen=True)
class NodeLayout:
    """One NUMA node's rows of cores, folded to the panel width."""

    node: int | None  # None: the host reported no NUMA layout
    utilisation: float | None  # mean percent over the node's reported cores
    rows: tuple[tuple[Core, ...], ...]
    mem_total: int | None = None
    mem_free: int | None = None


@dataclass(frozen=True)
class CoreLayout:
    """The whole heat strip: nodes, cores per row and whether groups of 8 get a gap."""

    nodes: tuple[NodeLayout, ...]
    per_row: int
    gaps: bool

    @property
    def row_count(self) -> int:
        """Rows the strip needs."""
        return sum(len(n.rows) for n in self.nodes)


GROUP = 8  # cores between gaps: 8 is a common CCX/cluster size and easy to count


def row_width(cells: int, gaps: bool) -> int:
    """Characters a row of ``cells`` cores takes."""
    if not gaps or cells <= 0:
        return max(cells, 0)
    return cells + (cells - 1) // GROUP


def fold_cores(host: HostModel, width: int) -> CoreLayout:
    """Lay out every core of the host in rows at most ``width`` characters wide.

    Each node's cores are split into the fewest rows that fit, of equal length, with a
    gap after every 8 cores when that costs no extra row.
    """
    width = max(width, 1)
    bound = frozenset(host.bound_cpus)
    groups: list[tuple[int | None, tuple[int, ...], int | None, int | None]] = []
    if host.numa_nodes:
        for node in sorted(host.numa_nodes, key=lambda n: n.id):
            groups.append((node.id, tuple(sorted(node.cpus)), node.mem_total, node.mem_free))
    elif host.cpu_percent:
        groups.append((None, tuple(range(len(host.cpu_percent))), None, None))
    biggest = max((len(cpus) for _, cpus, _, _ in groups), default=0)
    per_row, gaps = _choose_row(biggest, width)
    nodes = []
    for node_id, cpus, mem_total, mem_free in groups:
        cores = tuple(Core(cpu, _percent(host, cpu), cpu in bound) for cpu in cpus)
        rows = tuple(cores[i : i + per_row] for i in range(0, len(cores), per_row)) or ((),)
        readings = [c.percent for c in cores if c.percent is not None]
        util = sum(readings) / len(readings) if readings else None
        nodes.append(NodeLayout(node_id, util, rows, mem_total, mem_free))
    return CoreLayout(tuple(nodes), per_row, gaps)


def _choose_row(count: int, width: int) -> tuple[int, bool]:
    if count <= 0:
        return 1, False
    rows = math.ceil(count / width)
    per_row = math.ceil(count / rows)  # balanced: 40 cores in two rows of 20, not 24 + 16
    return per_row, row_width(per_row, True) <= width


def _percent(host: HostModel, cpu: int) -> float | None:
    if 0 <= cpu < len(host.cpu_percent):
        return float(host.cpu_percent[cpu])
    return None


def ranges(numbers: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``"0-3,8,10-11"`` (as taskset and lscpu write CPU lists)."""
    ordered = sorted(set(numbers))
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
