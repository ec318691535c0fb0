"""The NUMA planner: which CPUs the CPU inference engine should be bound to, and checking a binding.

sysHAX's deployment guide binds the CPU engine with two rules, kept here:

1. ``threads``: the engine's thread count equals the number of bound CPUs
   (``OMP_NUM_THREADS`` = the size of ``CUSTOM_CPU_AFFINITY``);
2. ``equal-per-node``: every NUMA node the binding uses contributes the same number of CPUs
   (on a Kunpeng 920 with 4 nodes x 40 cores: ``OMP_NUM_THREADS=160 CUSTOM_CPU_AFFINITY=0-159``).

A third is implied: ``online``, every bound CPU exists and is online. By default the plan
takes one hardware thread per physical core (an LLM's decode is memory-bound; SMT siblings
share a core's load/store units and add little). Pure functions over a :class:`Topology`;
only :func:`read_topology` touches sysfs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from syshaxd.monitor.host import CpulistError, format_cpulist, parse_cpulist, read_numa_topology
from syshaxd.snapshot import NumaNode

RULE_THREADS = "threads"
RULE_EQUAL = "equal-per-node"
RULE_ONLINE = "online"
RULE_TEXT = {
    RULE_THREADS: "the thread count equals the number of bound CPUs",
    RULE_EQUAL: "every NUMA node contributes the same number of CPUs",
    RULE_ONLINE: "every bound CPU exists and is online",
}


class PlanError(Exception):
    """No binding can satisfy the request; the message says why."""


@dataclass(frozen=True)
class Topology:
    """NUMA nodes with their online CPUs, the CPUs that exist, and SMT siblings."""

    nodes: tuple[NumaNode, ...]
    present: tuple[int, ...] = ()
    siblings: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    @property
    def online(self) -> tuple[int, ...]:
        """Every online CPU."""
        return tuple(sorted(c for n in self.nodes for c in n.cpus))

    def node_of(self, cpu: int) -> int | None:
        """The node holding an online CPU."""
        for node in self.nodes:
            if cpu in node.cpus:
                return node.id
        return None

    def primary_threads(self, cpus: Iterable[int]) -> tuple[int, ...]:
        """One CPU per physical core (the lowest-numbered online sibling) among ``cpus``."""
        chosen = set(cpus)
        keep = []
        for cpu in sorted(chosen):
            others = [s for s in self.siblings.get(cpu, (cpu,)) if s in chosen]
            if min(others, default=cpu) == cpu:
                keep.append(cpu)
        return tuple(keep)


@dataclass(frozen=True)
class Binding:
    """A planned binding of the CPU engine."""

    cpus: tuple[int, ...]
    nodes: tuple[int, ...]
    per_node: int
    notes: tuple[str, ...] = ()

    @property
    def threads(self) -> int:
        """Threads to run: one per bound CPU (rule ``threads``)."""
        return len(self.cpus)

    @property
    def cpulist(self) -> str:
        """The CPUs in the kernel's cpulist form (``0-159``)."""
        return format_cpulist(self.cpus)

    def vllm_env(self) -> dict[str, str]:
        """Environment for a CPU vLLM: sysHAX's names plus upstream vLLM's."""
        return {
            "OMP_NUM_THREADS": str(self.threads),
            "CUSTOM_CPU_AFFINITY": self.cpulist,
            "VLLM_CPU_OMP_THREADS_BIND": self.cpulist,
        }

    def llamacpp_command(self) -> str:
        """``numactl ... llama-server ...``: bound CPUs, memory interleaved over the nodes used."""
        return (
            f"numactl --physcpubind={self.cpulist} --interleave={format_cpulist(self.nodes)} "
            f"llama-server --threads {self.threads} --threads-batch {self.threads} --numa numactl"
        )

    def llamacpp_mask_flags(self) -> str:
        """llama.cpp's own affinity flags (honoured by builds without OpenMP only)."""
        mask = sum(1 << c for c in self.cpus)
        return f"--threads {self.threads} --threads-batch {self.threads} --cpu-mask {mask:x} --cpu-strict 1"


@dataclass(frozen=True)
class Violation:
    """A rule a binding breaks, with the evidence."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"rule {self.rule!r} ({RULE_TEXT[self.rule]}) is broken: {self.detail}"


# ---------------------------------------------------------------------------------------
# Reading


def _read_cpulist(path: Path) -> tuple[int, ...] | None:
    try:
        return parse_cpulist(path.read_text(encoding="ascii"))
    except (OSError, CpulistError):
        return None


def read_topology(sysfs: Path = Path("/sys")) -> Topology:
    """The topology under a sysfs root (``/sys``; tests pass a fake tree)."""
    cpu_root = sysfs / "devices" / "system" / "cpu"
    nodes = read_numa_topology(sysfs / "devices" / "system" / "node", cpu_root)
    online = sorted(c for n in nodes for c in n.cpus)
    present = _read_cpulist(cpu_root / "present") or tuple(online)
    siblings: dict[int, tuple[int, ...]] = {}
    for cpu in online:
        found = _read_cpulist(cpu_root / f"cpu{cpu}" / "topology" / "thread_siblings_list")
        siblings[cpu] = found if found else (cpu,)
    return Topology(nodes=nodes, present=tuple(present), siblings=siblings)


# ---------------------------------------------------------------------------------------
# Planning


def plan_binding(topo: Topology, cores: int | None = None, smt: bool = False) -> Binding:
    """The binding that follows the rules: the same number of CPUs from every node.

    Args:
        topo: the host's topology.
        cores: how many CPUs to bind (default: as many as the rules allow). Rounded down
            to a multiple of the number of nodes used; fewer CPUs than nodes use that many nodes.
        smt: also bind SMT siblings (default: one thread per physical core).

    Raises:
        PlanError: no CPU is online, or ``cores`` is more than the rules allow.
    """
    usable: dict[int, tuple[int, ...]] = {}
    notes: list[str] = []
    for node in topo.nodes:
        cpus = node.cpus if smt else topo.primary_threads(node.cpus)
        if cpus:
            usable[node.id] = cpus
        else:
            notes.append(f"node {node.id} has no online CPU (memory only) and is not used")
    if not usable:
        raise PlanError("no online CPU found")
    if not smt and any(len(topo.primary_threads(n.cpus)) < len(n.cpus) for n in topo.nodes):
        notes.append("one thread per physical core (SMT siblings left out; --smt binds them too)")
    node_ids = sorted(usable)
    per_node = min(len(c) for c in usable.values())
    for node_id in node_ids:
        extra = len(usable[node_id]) - per_node
        if extra:
            notes.append(
                f"node {node_id} offers {len(usable[node_id])} CPUs: {extra} left out so every node "
                f"contributes {per_node}"
            )
    if cores is not None:
        limit = per_node * len(node_ids)
        if cores < 1:
            raise PlanError("--cores must be at least 1")
        if cores > limit:
            raise PlanError(
                f"--cores {cores} is more than the rules allow on this host: at most {limit} "
                f"({len(node_ids)} nodes x {per_node} CPUs)"
            )
        node_ids = node_ids[: min(cores, len(node_ids))]
        per_node = cores // len(node_ids)
        if per_node * len(node_ids) != cores:
            notes.append(
                f"asked for {cores} CPUs; binding {per_node * len(node_ids)} so each of the "
                f"{len(node_ids)} nodes contributes {per_node}"
            )
    cpus = tuple(c for node_id in node_ids for c in usable[node_id][:per_node])
    return Binding(cpus=tuple(sorted(cpus)), nodes=tuple(node_ids), per_node=per_node, notes=tuple(notes))


# ---------------------------------------------------------------------------------------
# Checking


def check_binding(topo: Topology, cpus: Sequence[int], threads: int | None = None) -> list[Violation]:
    """Every rule a given binding breaks (empty: it follows them all).

    Args:
        topo: the host's topology.
        cpus: the bound CPUs.
        threads: the engine's thread count, if known (``OMP_NUM_THREADS``, ``--threads``).
    """
    found: list[Violation] = []
    chosen = sorted(set(cpus))
    if not chosen:
        return [Violation(RULE_ONLINE, "the binding names no CPU")]
    online = set(topo.online)
    present = set(topo.present) | online
    missing = [c for c in chosen if c not in present]
    offline = [c for c in chosen if c in present and c not in online]
    if missing:
        found.append(Violation(
            RULE_ONLINE,
            f"CPU {format_cpulist(missing)} {'does' if len(missing) == 1 else 'do'} not exist "
            f"(this host has CPUs {format_cpulist(present)})",
        ))
    if offline:
        found.append(Violation(RULE_ONLINE, f"CPU {format_cpulist(offline)} {'is' if len(offline) == 1 else 'are'} offline"))
    per_node: dict[int, int] = {}
    for cpu in chosen:
        node = topo.node_of(cpu)
        if node is not None:
            per_node[node] = per_node.get(node, 0) + 1
    if len(set(per_node.values())) > 1:
        counts = ", ".join(f"node {n}: {k}" for n, k in sorted(per_node.items()))
        found.append(Violation(RULE_EQUAL, f"the nodes contribute different numbers of CPUs ({counts})"))
    if threads is not None and threads != len(chosen):
        found.append(Violation(
            RULE_THREADS, f"{threads} threads for {len(chosen)} bound CPUs (use {len(chosen)} threads)"
        ))
    return found


def binding_notes(topo: Topology, cpus: Sequence[int]) -> list[str]:
    """Advice that is not a rule: unused nodes, two threads of one core."""
    notes = []
    chosen = set(cpus)
    used = {topo.node_of(c) for c in chosen} - {None}
    with_cpus = {n.id for n in topo.nodes if n.cpus}
    if used and used != with_cpus:
        notes.append(
            f"uses {len(used)} of {len(with_cpus)} NUMA nodes ({format_cpulist(sorted(n for n in used if n is not None))})"
        )
    shared = sorted(c for c in chosen if len([s for s in topo.siblings.get(c, (c,)) if s in chosen]) > 1)
    if shared:
        notes.append(f"CPUs {format_cpulist(shared)} are SMT siblings of the same cores")
    return notes


def parse_check_arg(text: str) -> tuple[tuple[int, ...], int | None]:
    """``"0-159"``, or ``"OMP_NUM_THREADS=160 CUSTOM_CPU_AFFINITY=0-159"`` -> (cpus, threads).

    Raises:
        ValueError: with a message for the user.
    """
    if "=" not in text:
        return parse_cpulist(text), None
    cpus: tuple[int, ...] | None = None
    threads: int | None = None
    for item in text.split():
        name, _, value = item.partition("=")
        if name in ("CUSTOM_CPU_AFFINITY", "VLLM_CPU_OMP_THREADS_BIND"):
            cpus = parse_cpulist(value)
        elif name == "OMP_NUM_THREADS":
            if not value.isdigit():
                raise ValueError(f"OMP_NUM_THREADS={value!r}: expected a number")
            threads = int(value)
        else:
            raise ValueError(
                f"unknown setting {name!r}: give a cpulist (0-159) or "
                "OMP_NUM_THREADS=N CUSTOM_CPU_AFFINITY=LIST"
            )
    if cpus is None:
        raise ValueError("no CPU list: add CUSTOM_CPU_AFFINITY=LIST (or VLLM_CPU_OMP_THREADS_BIND=LIST)")
    return cpus, threads
