"""Which CPUs the CPU engine really runs on: read from its own process, not from a plan.

The console marks the CPU engine's cores on the NUMA map. The planner (:mod:`.numa`) says
where the engine *should* be bound; what counts is where it *is* (``numactl`` forgotten, a
unit's ``CPUAffinity=`` changed, an engine started by hand). So the process listening on the
engine's port is found, and its affinity read (``sched_getaffinity``). An engine on another
host, or one this user may not inspect, gives nothing: the console then marks no cores
rather than guessing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

import psutil

log = logging.getLogger("syshaxd.monitor")

#: Seconds between searches for an engine process that was not found (or has gone).
FIND_INTERVAL = 30.0
_LOCAL = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "::", ""}


def local_port(url: str) -> int | None:
    """The port of an engine URL on this host, or None for a remote engine."""
    parts = urlsplit(url)
    if (parts.hostname or "") not in _LOCAL:
        return None
    return parts.port or (443 if parts.scheme == "https" else 80)


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` on this host, if it can be seen."""
    try:
        connections = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    return None


class EngineAffinity:
    """The union of the CPU affinities of the local engine processes behind ``urls``."""

    def __init__(self, urls: Iterable[str], *, clock: Callable[[], float] = time.monotonic,
                 find: Callable[[int], int | None] = listening_pid) -> None:
        self._ports = [p for p in (local_port(u) for u in urls) if p is not None]
        self._clock = clock
        self._find = find
        self._procs: dict[int, psutil.Process] = {}
        self._searched_at: float | None = None

    def cpus(self) -> tuple[int, ...]:
        """The CPUs the engines may run on now, sorted; () when none can be read."""
        missing = [p for p in self._ports if p not in self._procs]
        now = self._clock()
        if missing and (self._searched_at is None or now - self._searched_at >= FIND_INTERVAL):
            self._searched_at = now
            for port in missing:
                pid = self._find(port)
                if pid is not None:
                    try:
                        self._procs[port] = psutil.Process(pid)
                    except psutil.Error:
                        pass
        found: set[int] = set()
        for port, proc in list(self._procs.items()):
            try:
                found.update(proc.cpu_affinity() or ())
            except psutil.Error:  # the engine restarted: find it again
                del self._procs[port]
                self._searched_at = None
        return tuple(sorted(found))
