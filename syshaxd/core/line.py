"""The waiting line: requests the policy has held, in the order capacity is offered to them.

Requests are ordered by priority (their class's; lower first), then:

- ``fifo`` (sysHAX, and every policy but ``adaptive``): arrival;
- ``deadline`` (``adaptive``): the earliest TTFT deadline among requests that can still
  meet it; a request whose wait has passed its class's TTFT target cannot count towards
  goodput wherever it runs, so it moves to a second lane served only when the first is
  empty, and a full line refuses its oldest late request rather than a new one.

No request starves behind higher priorities: one that has waited ``promote_after``
seconds is offered room as if it were of the first class. A full line sheds sheddable
requests first. Every operation is O(log n): heaps with lazy deletion (an entry whose
ticket left the line, or was placed again, is skipped when it surfaces).
"""

from __future__ import annotations

import heapq
from itertools import count

from syshaxd.core.ticket import LATE, NOT_WAITING, ON_TIME, Ticket
from syshaxd.policy import QueueOrder

#: The priority of a request promoted after a long wait: ahead of every class.
PROMOTED = -(10**9)

_Entry = tuple[int, float, int, int, Ticket]  # (priority, deadline or arrival order, seq, placing, ticket)
_Timer = tuple[float, int, int, Ticket]  # (when, seq, placing, ticket)


class WaitingLine:
    """A bounded set of waiting tickets, offered capacity in queue order."""

    def __init__(self, limit: int, order: QueueOrder = "fifo", ttft_target: float = 5.0,
                 promote_after: float = 60.0) -> None:
        self.limit = limit
        self.order: QueueOrder = order
        self.ttft_target = ttft_target
        self.promote_after = promote_after
        self._seq = count()
        self._count = 0
        self._on_time: list[_Entry] = []
        self._late: list[_Entry] = []
        self._lateness: list[_Timer] = []  # when each ticket turns late
        self._promotions: list[_Timer] = []  # when each ticket has waited long enough to go first
        self._deadlines: list[_Timer] = []  # each ticket's request deadline
        self._shed: list[tuple[int, int, Ticket]] = []  # sheddable tickets, the least important first

    def __len__(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        """Whether one more ticket would pass the limit."""
        return self._count >= self.limit

    def waiting(self) -> list[Ticket]:
        """Every waiting ticket, in arrival order."""
        return sorted((t for *_, t in self._deadlines if t.lane != NOT_WAITING), key=lambda t: t.seq)

    # -- in and out ----------------------------------------------------------------------

    def push(self, ticket: Ticket, now: float) -> None:
        """Put ``ticket`` in line (its place follows the order)."""
        ticket.seq = next(self._seq)
        self._count += 1
        if len(self._deadlines) > 2 * self._count + 64:
            self._compact()
        heapq.heappush(self._deadlines, (ticket.deadline, ticket.seq, 0, ticket))
        if ticket.priority > PROMOTED:
            heapq.heappush(self._promotions, (ticket.arrived + self.promote_after, ticket.seq, 0, ticket))
        heapq.heappush(self._lateness, (self.turns_late(ticket), ticket.seq, 0, ticket))
        level = ticket.features.level
        if level.sheddable:
            heapq.heappush(self._shed, (-level.priority, -ticket.seq, ticket))
        self._place(ticket, late=self.turns_late(ticket) <= now)

    def turns_late(self, ticket: Ticket) -> float:
        """When ``ticket`` can no longer get its first token within its TTFT target."""
        own = ticket.features.level.ttft
        return ticket.arrived + (own if own is not None else self.ttft_target)

    def _place(self, ticket: Ticket, late: bool) -> None:
        ticket.placing += 1
        if self.order == "deadline" and late:
            ticket.lane = LATE
            heapq.heappush(self._late, (ticket.priority, float(ticket.seq), ticket.seq, ticket.placing, ticket))
            return
        ticket.lane = ON_TIME
        key = self.turns_late(ticket) if self.order == "deadline" else float(ticket.seq)
        heapq.heappush(self._on_time, (ticket.priority, key, ticket.seq, ticket.placing, ticket))

    def _compact(self) -> None:
        # Tickets admitted from the head leave stale entries in the other heaps until they
        # surface; dropping them keeps every heap within twice the line's size.
        self._deadlines = [e for e in self._deadlines if e[3].lane != NOT_WAITING]
        self._lateness = [e for e in self._lateness if e[3].lane != NOT_WAITING]
        self._promotions = [e for e in self._promotions if e[3].lane != NOT_WAITING]
        self._shed = [e for e in self._shed if e[2].lane != NOT_WAITING]
        heapq.heapify(self._shed)
        self._on_time = [e for e in self._on_time if e[4].lane == ON_TIME and e[3] == e[4].placing]
        self._late = [e for e in self._late if e[4].lane == LATE and e[3] == e[4].placing]
        for heap in (self._deadlines, self._lateness, self._promotions):
            heapq.heapify(heap)
        heapq.heapify(self._on_time)
        heapq.heapify(self._late)

    def remove(self, ticket: Ticket) -> None:
        """Take ``ticket`` out of line (admitted, refused, withdrawn); its entries go stale."""
        if ticket.lane != NOT_WAITING:
            ticket.lane = NOT_WAITING
            self._count -= 1

    def reorder(self, order: QueueOrder, ttft_target: float, now: float) -> None:
        """Follow a new order or default TTFT target (the configuration changed): every ticket
        is placed again, and asked again."""
        if order == self.order and ttft_target == self.ttft_target:
            return
        waiting = self.waiting()
        self.order, self.ttft_target = order, ttft_target
        self._on_time, self._late = [], []
        self._lateness = [(self.turns_late(t), t.seq, 0, t) for t in waiting]
        heapq.heapify(self._lateness)
        for ticket in waiting:
            ticket.asked = -1
            self._place(ticket, late=self.turns_late(ticket) <= now)

    # -- time passing ----------------------------------------------------------------------

    def advance(self, now: float) -> list[Ticket]:
        """Let time pass: tickets that waited ``promote_after`` go first, tickets past their TTFT
        target turn late (deadline order: to the second lane). Returns those that turned late."""
        promotions = self._promotions
        while promotions and promotions[0][0] <= now:
            ticket = heapq.heappop(promotions)[3]
            if ticket.lane != NOT_WAITING and ticket.priority > PROMOTED:
                ticket.priority = PROMOTED
                ticket.asked = -1
                self._place(ticket, late=ticket.lane == LATE)
        turned = []
        lateness = self._lateness
        while lateness and lateness[0][0] <= now:
            ticket = heapq.heappop(lateness)[3]
            if ticket.lane == ON_TIME:
                turned.append(ticket)
                ticket.asked = -1  # late is a new state: the policy's answer may differ
                if self.order == "deadline":
                    self._place(ticket, late=True)
        return turned

    # -- who is next ---------------------------------------------------------------------

    def head(self) -> Ticket | None:
        """The ticket capacity is offered to next, or None when nobody waits."""
        for lane, heap in ((ON_TIME, self._on_time), (LATE, self._late)):
            while heap and (heap[0][4].lane != lane or heap[0][3] != heap[0][4].placing):
                heapq.heappop(heap)
            if heap:
                return heap[0][4]
        return None

    def evictable(self, newcomer: Ticket) -> Ticket | None:
        """The ticket a full line refuses to make room for ``newcomer``, or None (refuse the newcomer).

        A sheddable ticket of the lowest priority (the newest of them) when the newcomer is not
        sheddable; then, in ``deadline`` order, the oldest request that can no longer meet its
        TTFT target.
        """
        if not newcomer.features.level.sheddable:
            while self._shed and self._shed[0][2].lane == NOT_WAITING:
                heapq.heappop(self._shed)
            if self._shed:
                return self._shed[0][2]
        if self.order != "deadline":
            return None
        while self._late and (self._late[0][4].lane != LATE or self._late[0][3] != self._late[0][4].placing):
            heapq.heappop(self._late)
        return self._late[0][4] if self._late else None

    def next_lateness(self) -> float | None:
        """When the next waiting ticket turns late, if anyone waits."""
        lateness = self._lateness
        while lateness and lateness[0][3].lane != ON_TIME:
            heapq.heappop(lateness)
        return lateness[0][0] if lateness else None

    def expired(self, now: float) -> list[Ticket]:
        """Tickets whose request deadline has passed, taken out of line."""
        out = []
        deadlines = self._deadlines
        while deadlines and (deadlines[0][3].lane == NOT_WAITING or deadlines[0][0] <= now):
            ticket = heapq.heappop(deadlines)[3]
            if ticket.lane != NOT_WAITING:
                self.remove(ticket)
                out.append(ticket)
        return out

    def next_deadline(self) -> float | None:
        """The earliest request deadline in line, if anyone waits."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][3].lane == NOT_WAITING:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    def drain(self) -> list[Ticket]:
        """Every waiting ticket, taken out of line, in arrival order."""
        out = self.waiting()
        for ticket in out:
            self.remove(ticket)
        self._on_time, self._late, self._lateness, self._promotions, self._deadlines = [], [], [], [], []
        self._shed = []
        return out
