"""GPU slots a sheddable request could give up: placed whole on a GPU engine, no first byte yet.

An interactive request is never refused while a sheddable one holds a GPU slot it could give
up before its first token. :class:`Revocable` keeps those requests -- sheddable, placed whole
on a GPU engine, not started there, and with a driver that can take them back (the ticket's
``revoke``) -- and names the one to take back: the least important (the highest priority
number), the most recently placed among equals (it has done the least work).

Before its first byte the client has nothing: a streamed answer's status line goes out with
its first event, a whole answer's with the whole of it. So a request taken back is answered
429 ``shed`` like one refused in line, even when the engine had started its prefill. A
prefill/decode split is not kept: its GPU part is a prefill, which leaves the GPU by design.
"""

from __future__ import annotations

from itertools import count

from syshaxd.core.ticket import Refusal, Ticket


class Revocable:
    """Sheddable tickets that hold a GPU engine and have no first byte there yet."""

    def __init__(self) -> None:
        self._held: dict[Ticket, tuple[int, str]] = {}  # ticket -> (placing order, its GPU engine)
        self._order = count()

    def __len__(self) -> int:
        return len(self._held)

    def add(self, ticket: Ticket, engine: str) -> None:
        """``ticket`` now holds GPU engine ``engine``, unstarted (kept only if its driver can take it back)."""
        if ticket.features.level.sheddable and ticket.revoke is not None:
            self._held[ticket] = (next(self._order), engine)

    def drop(self, ticket: Ticket, engine: str | None = None) -> None:
        """``ticket`` started on ``engine``, or left it (None: whatever engine it held)."""
        held = self._held.get(ticket)
        if held is not None and (engine is None or held[1] == engine):
            del self._held[ticket]

    def pick(self) -> Ticket | None:
        """The ticket to take back: the least important, the most recently placed among equals."""
        best: tuple[int, int] | None = None
        found = None
        for ticket, (order, engine) in self._held.items():
            if ticket.done or ticket.revoke is None or engine not in ticket.unstarted:
                continue  # a driver that forgot to tell the core: never take back what may have started
            key = (ticket.features.level.priority, order)
            if best is None or key > best:
                best, found = key, ticket
        return found


def gave_up(ticket: Ticket) -> Refusal:
    """What a ticket taken back is told."""
    return Refusal(429, "shed", "gave up its GPU slot to a more important request before its first token: class "
                   f"{ticket.features.level.name!r} is sheddable", retry_after=1)
