"""The conductor's books: what it has sent each engine, and how every request ended.

The monitor's scrapes say what an engine reports; the books say what the conductor has
routed there and not yet seen finish (scheduled = no first byte yet, in flight = not over).
Policies see both (:meth:`Books.merge`). Only a :class:`~syshaxd.conductor.flight.Flight`
changes the counts, and it undoes exactly what it did: every request is released once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from syshaxd.conductor.records import RequestLog
from syshaxd.conductor.stats import Stats
from syshaxd.config import EngineSpec
from syshaxd.snapshot import EngineView, Snapshot

V = TypeVar("V", EngineView, Snapshot)


@dataclass(eq=False)
class EngineBooks:
    """The conductor's own counts for one engine."""

    spec: EngineSpec
    inflight: int = 0  # routed here, not finished
    scheduled: int = 0  # routed here, no first byte yet
    decode_tokens: int = 0  # output tokens the in-flight requests may still write (their max_tokens)
    prompt_tokens: int = 0  # prompt tokens of the scheduled requests (their prefill is still to come)
    answered_at: float | None = None  # time.monotonic() when the engine last sent answer bytes
    #: The answers it has started: time.monotonic() of the first byte and max_tokens, by request.
    answers: dict[Hashable, tuple[float, int]] = field(default_factory=dict)


def _evolve(obj: V, **changes: Any) -> V:
    """``dataclasses.replace`` for the snapshot's frozen dataclasses (plain fields, no
    ``__post_init__``) without running ``__init__`` again: this runs once per routing
    decision, and ``replace`` was most of its cost."""
    new = object.__new__(type(obj))
    fields = new.__dict__
    fields.update(obj.__dict__)
    fields.update(changes)
    return new


class Books:
    """Every engine's counts, the requests open against them, and the stats they end in."""

    def __init__(self, specs: Iterable[EngineSpec], stats: Stats, records: RequestLog | None = None) -> None:
        self.engines: dict[str, EngineBooks] = {spec.name: EngineBooks(spec) for spec in specs}
        self.stats = stats
        #: Every finished request, the last ones kept (:mod:`syshaxd.conductor.records`).
        self.records = records if records is not None else RequestLog()
        #: Called whenever capacity is given back (the admission queue's kick).
        self.on_release: Callable[[], None] = lambda: None
        self._open: set[Hashable] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    # -- what the policy sees ----------------------------------------------------------

    def merge(self, snap: Snapshot, flags: Callable[[str], tuple[bool, bool]]) -> Snapshot:
        """The monitor's snapshot with engine flags and these counts filled in, one view per engine."""
        seen = {e.name: e for e in snap.engines}
        now = time.monotonic()
        views = []
        for name, book in self.engines.items():
            spec = book.spec
            view = seen.get(name) or EngineView(name, spec.device, spec.url, spec.dialect)
            enabled, draining = flags(name)
            views.append(_evolve(view, enabled=enabled, draining=draining, inflight=book.inflight,
                                 scheduled=book.scheduled, inflight_decode_tokens=book.decode_tokens,
                                 scheduled_prompt_tokens=book.prompt_tokens,
                                 answers=tuple((now - at, most) for at, most in book.answers.values())))
        return _evolve(snap, engines=tuple(views))

    def inflight(self) -> dict[str, int]:
        """Requests in flight per engine."""
        return {name: book.inflight for name, book in self.engines.items()}

    def answered_at(self, name: str) -> float | None:
        """When engine ``name`` last sent answer bytes (time.monotonic()), if ever."""
        book = self.engines.get(name)
        return book.answered_at if book is not None else None

    def hold(self, name: str) -> None:
        """Count a pass-through request (no routing, no tokens) against engine ``name``."""
        self.engines[name].inflight += 1

    def unhold(self, name: str) -> None:
        """A pass-through request on engine ``name`` is over."""
        self.engines[name].inflight -= 1
        self.on_release()

    # -- requests open against the books -----------------------------------------------

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
