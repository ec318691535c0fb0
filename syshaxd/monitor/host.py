"""The host as the console and the NUMA planner see it: CPUs, NUMA nodes, memory, GPUs.

Pure parts (``parse_cpulist``/``format_cpulist``, the sysfs readers with a ``root``
argument) are testable on fake trees; :class:`HostSampler` adds psutil and, when the
optional ``nvidia-ml-py`` package and a GPU exist, NVML.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

from syshaxd.snapshot import GpuView, HostView, NumaNode

log = logging.getLogger(__name__)

NODE_ROOT = Path("/sys/devices/system/node")


class CpulistError(ValueError):
    """A cpulist string ("0-39,80-119") that cannot be read."""


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse the kernel's cpulist format ("0-3,8,10-11") into sorted, unique CPU ids.

    An empty string is no CPUs. Raises :class:`CpulistError` with the offending part.
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise CpulistError(f"bad cpulist part {part!r} in {text.strip()!r}: expected N or N-M") from None
        if lo < 0 or hi < lo:
            raise CpulistError(f"bad cpulist range {part!r} in {text.strip()!r}: expected 0 <= N <= M")
        cpus.update(range(lo, hi + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids as a kernel cpulist: ``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif prev is not None and cpu == prev + 1:
            prev = cpu
        else:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = cpu
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(parts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


def read_online_cpus(cpu_root: Path = Path("/sys/devices/system/cpu")) -> tuple[int, ...] | None:
    """The online CPUs (``cpu/online``), or None when the file is missing or unreadable."""
    text = _read(cpu_root / "online")
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except CpulistError:
        log.warning("cannot read %s: %r", cpu_root / "online", text)
        return None


def _node_meminfo(node_dir: Path) -> tuple[int | None, int | None]:
    """(MemTotal, MemFree) in bytes from ``nodeN/meminfo`` ("Node 0 MemTotal:  123 kB")."""
    text = _read(node_dir / "meminfo")
    total = free = None
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("MemTotal:", "MemFree:") and fields[3].isdigit():
            value = int(fields[3]) * (1024 if len(fields) > 4 and fields[4] == "kB" else 1)
            if fields[2] == "MemTotal:":
                total = value
            else:
                free = value
    return total, free


def read_numa_topology(root: Path = NODE_ROOT, cpu_root: Path | None = None) -> tuple[NumaNode, ...]:
    """The NUMA nodes with their online CPUs and memory, read from sysfs.

    Args:
        root: the node directory (``/sys/devices/system/node``).
        cpu_root: the CPU directory whose ``online`` file lists online CPUs (default:
            ``root``'s sibling ``cpu``).

    Returns one node holding every online CPU (and the machine's memory) when ``root`` is
    missing or lists no node, as on machines without NUMA information. Nodes without an
    online CPU (memory-only nodes, or all CPUs offline) are kept with an empty CPU list.
    """
    cpu_root = cpu_root if cpu_root is not None else root.parent / "cpu"
    online = read_online_cpus(cpu_root)
    online_set = set(online) if online is not None else None
    nodes: list[NumaNode] = []
    try:
        entries = sorted(
            (int(p.name[4:]), p) for p in root.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()
        )
    except OSError:
        entries = []
    for node_id, node_dir in entries:
        try:
            cpus = parse_cpulist(_read(node_dir / "cpulist") or "")
        except CpulistError as exc:
            log.warning("%s: %s", node_dir / "cpulist", exc)
            cpus = ()
        if online_set is not None:
            cpus = tuple(c for c in cpus if c in online_set)
        total, free = _node_meminfo(node_dir)
        nodes.append(NumaNode(id=node_id, cpus=cpus, mem_total=total, mem_free=free))
    if nodes:
        return tuple(nodes)
    cpus = online if online is not None else tuple(range(os.cpu_count() or 1))
    memory = psutil.virtual_memory()
    return (NumaNode(id=0, cpus=cpus, mem_total=int(memory.total), mem_free=int(memory.available)),)


class _Nvml:
    """NVML when the optional package and a driver are present; otherwise reports no GPUs."""

    def __init__(self) -> None:
        self._nvml: Any = None
        try:
            import pynvml  # optional: the [gpu] extra

            pynvml.nvmlInit()
        except Exception as exc:  # ImportError, or an NVMLError without a driver or GPU
            log.debug("NVML unavailable: %s", exc)
            return
        self._nvml = pynvml

    def sample(self) -> tuple[GpuView, ...]:
        nvml = self._nvml
        if nvml is None:
            return ()
        gpus: list[GpuView] = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                gpus.append(
                    GpuView(
                        index=index,
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        utilization=float(util.gpu) / 100.0,
                        mem_used=int(mem.used),
                        mem_total=int(mem.total),
                    )
                )
        except Exception as exc:  # a GPU that falls off the bus must not stop the monitor
            log.warning("NVML sample failed: %s", exc)
        return tuple(gpus)

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # shutting down: nothing useful to do with the error
                pass
            self._nvml = None


#: Seconds between readings of the NUMA topology and each node's free memory.
TOPOLOGY_EVERY = 10.0


class HostSampler:
    """Samples the host each time it is asked; cheap and non-blocking.

    ``psutil.cpu_percent(interval=None)`` reports the use since the previous call, so the
    constructor primes it and each ``sample()`` covers the time since the last one.

    Args:
        node_root: the sysfs node directory (tests pass a fake tree).
        bound_cpus: where the CPU engine runs (its processes' affinity), read at each sample.
        use_nvml: try NVML for GPU figures.
    """

    def __init__(self, node_root: Path = NODE_ROOT, bound_cpus: Callable[[], Iterable[int]] = tuple,
                 use_nvml: bool = True, *, topology_every: float = TOPOLOGY_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_root = node_root
        self.bound_cpus = bound_cpus
        self._nvml = _Nvml() if use_nvml else None
        self._topology_every = topology_every
        self._clock = clock
        self._nodes: tuple[NumaNode, ...] = ()
        self._nodes_at: float | None = None
        psutil.cpu_percent(percpu=True)

    def _topology(self) -> tuple[NumaNode, ...]:
        # Nodes, their CPUs and their free memory move slowly; reading a dozen sysfs files per
        # node at every sample was most of an idle daemon's host sampling.
        now = self._clock()
        if self._nodes_at is None or now - self._nodes_at >= self._topology_every:
            self._nodes, self._nodes_at = read_numa_topology(self.node_root), now
        return self._nodes

    def sample(self) -> HostView:
        """One HostView: per-CPU use indexed by CPU id, NUMA nodes, memory and GPUs."""
        nodes = self._topology()
        memory = psutil.virtual_memory()
        return HostView(
            cpu_percent=self._per_cpu(nodes),
            numa_nodes=nodes,
            mem_total=int(memory.total),
            mem_used=int(memory.total - memory.available),
            gpus=self._nvml.sample() if self._nvml else (),
            bound_cpus=tuple(self.bound_cpus()),
        )

    @staticmethod
    def _per_cpu(nodes: tuple[NumaNode, ...]) -> tuple[float, ...]:
        """Per-CPU percentages placed at their CPU id (psutil lists online CPUs only)."""
        values = psutil.cpu_percent(percpu=True)
        online = sorted({c for node in nodes for c in node.cpus})
        if len(online) != len(values) or not online:
            return tuple(float(v) for v in values)
        placed = [0.0] * (online[-1] + 1)
        for cpu, value in zip(online, values, strict=True):
            placed[cpu] = float(value)
        return tuple(placed)

    def close(self) -> None:
        """Release NVML."""
        if self._nvml is not None:
            self._nvml.close()
