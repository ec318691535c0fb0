"""The conductor's own records around the core: requests open, engines answering, stats, records.

What each engine holds is the scheduling core's ledger (:mod:`syshaxd.core.ledger`); these
books keep what only the daemon needs: which requests are still open (the drain waits for
them), when each engine last sent answer bytes (the monitor's liveness check), the
statistics the console and ``/metrics`` show, and the record of every finished request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from syshaxd.conductor.records import RequestLog
from syshaxd.conductor.stats import Stats


class Books:
    """Requests open, engines' last answers, the stats and the request records."""

    def __init__(self, stats: Stats, records: RequestLog | None = None) -> None:
        self.stats = stats
        #: Every finished request, the last ones kept (:mod:`syshaxd.conductor.records`).
        self.records = records if records is not None else RequestLog()
        #: time.monotonic() when each engine last sent answer bytes, by name.
        self.answered: dict[str, float] = {}
        self._open: set[Hashable] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def answered_at(self, name: str) -> float | None:
        """When engine ``name`` last sent answer bytes (time.monotonic()), if ever."""
        return self.answered.get(name)

    @property
    def open_count(self) -> int:
        """Requests accounted for and not yet finished (queued ones included)."""
        return len(self._open)

    def opened(self, flight: Hashable) -> None:
        """A request starts to be accounted for."""
        self._open.add(flight)
        self._idle.clear()

    async def wait_idle(self) -> None:
        """Return once no request is open."""
        await self._idle.wait()

    def closed(self, flight: Hashable) -> None:
        """A request ended: it released its engines and wrote its record already."""
        self._open.discard(flight)
        if not self._open:
            self._idle.set()
