"""The monitor: engine scrapes, the host and its NUMA layout, into one immutable Snapshot.

Also the NUMA planner (:mod:`.numa`): where the CPU engine should be bound, and whether it is.
"""

from __future__ import annotations

from syshaxd.monitor.affinity import EngineAffinity
from syshaxd.monitor.host import (
    CpulistError,
    HostSampler,
    format_cpulist,
    parse_cpulist,
    read_numa_topology,
)
from syshaxd.monitor.monitor import Monitor
from syshaxd.monitor.numa import (
    RULE_TEXT,
    Binding,
    PlanError,
    Topology,
    binding_notes,
    check_binding,
    parse_check_arg,
    plan_binding,
    read_topology,
)

__all__ = [
    "RULE_TEXT", "Binding", "CpulistError", "EngineAffinity", "HostSampler", "Monitor", "PlanError", "Topology",
    "binding_notes", "check_binding", "format_cpulist", "parse_check_arg", "parse_cpulist", "plan_binding",
    "read_numa_topology", "read_topology",
]  # fmt: skip
