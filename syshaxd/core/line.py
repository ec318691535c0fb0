"""The waiting line: requests the policy has held, in the order capacity is offered to them.

``fifo`` (sysHAX, and every policy but ``adaptive``): priority, then arrival. ``deadline``
(``adaptive``): among requests that can still get their first token within the TTFT
target, priority then the earliest deadline; a request whose wait has passed the target
cannot count towards goodput wherever it runs, so it moves to a second lane served only
when the first is empty, and a full line refuses its oldest late request rather than a
new one. Every operation is O(log n): heaps with lazy deletion (a ticket that left the
line, or moved lanes, leaves a stale entry that is skipped when it surfaces).
"""

from __future__ import annotations

import heapq
from itertools import count

from syshaxd.core.ticket import LATE, NOT_WAITING, ON_TIME, Ticket
from syshaxd.policy import QueueOrder

_Entry = tuple[int, float, int, Ticket]  # (priority, deadline or arrival order, seq, ticket)


class WaitingLine:
    """A bounded set of waiting tickets, offered capacity in queue order."""

    def __init__(self, limit: int, order: QueueOrder = "fifo", ttft_target: float = 5.0) -> None:
        self.limit = limit
        self.order: QueueOrder = order
        self.ttft_target = ttft_target
        self._seq = count()
        self._count = 0
        self._on_time: list[_Entry] = []
        self._late: list[_Entry] = []
        self._lateness: list[tuple[float, int, Ticket]] = []  # (when it turns late, seq, ticket)
        self._deadlines: list[tuple[float, int, Ticket]] = []  # (request deadline, seq, ticket)

    def __len__(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        """Whether one more ticket would pass the limit."""
        return self._count >= self.limit

    # -- in and out ----------------------------------------------------------------------

    def push(self, ticket: Ticket, now: float) -> None:
        """Put ``ticket`` in line (its place follows the order)."""
        ticket.seq = next(self._seq)
        self._count += 1
        if len(self._deadlines) > 2 * self._count + 64:
            self._compact()
        heapq.heappush(self._deadlines, (ticket.deadline, ticket.seq, ticket))
        self._place(ticket, now)

    def _place(self, ticket: Ticket, now: float) -> None:
        turns_late = ticket.arrived + self.ttft_target
        if self.order == "deadline" and turns_late <= now:
            ticket.lane = LATE
            heapq.heappush(self._late, (ticket.priority, float(ticket.seq), ticket.seq, ticket))
            return
        ticket.lane = ON_TIME
        key = turns_late if self.order == "deadline" else float(ticket.seq)
        heapq.heappush(self._on_time, (ticket.priority, key, ticket.seq, ticket))
        if self.order == "deadline":
            heapq.heappush(self._lateness, (turns_late, ticket.seq, ticket))

    def _compact(self) -> None:
        # Tickets admitted from the head leave stale entries in the other heaps until they
        # surface; dropping them keeps every heap within twice the line's size.
        self._deadlines = [e for e in self._deadlines if e[2].lane != NOT_WAITING]
        self._lateness = [e for e in self._lateness if e[2].lane == ON_TIME]
        self._on_time = [e for e in self._on_time if e[3].lane == ON_TIME]
        self._late = [e for e in self._late if e[3].lane == LATE]
        heapq.heapify(self._deadlines)
        heapq.heapify(self._lateness)
        heapq.heapify(self._on_time)
        heapq.heapify(self._late)

    def remove(self, ticket: Ticket) -> None:
        """Take ``ticket`` out of line (admitted, refused, withdrawn); its entries go stale."""
        if ticket.lane != NOT_WAITING:
            ticket.lane = NOT_WAITING
            self._count -= 1

    def reorder(self, order: QueueOrder, ttft_target: float, now: float) -> None:
        """Follow a new order or TTFT target (the policy changed): every ticket is placed again."""
        if order == self.order and ttft_target == self.ttft_target:
            return
        waiting = sorted((t for *_, t in self._deadlines if t.lane != NOT_WAITING), key=lambda t: t.seq)
        self.order, self.ttft_target = order, ttft_target
        self._on_time, self._late, self._lateness = [], [], []
        for ticket in waiting:
            ticket.asked = -1
            self._place(ticket, now)

    # -- who is next ---------------------------------------------------------------------

    def head(self, now: float) -> Ticket | None:
        """The ticket capacity is offered to next, or None when nobody waits."""
        self._turn_late(now)
        for lane, heap in ((ON_TIME, self._on_time), (LATE, self._late)):
            while heap and heap[0][3].lane != lane:
                heapq.heappop(heap)
            if heap:
                return heap[0][3]
        return None

    def _turn_late(self, now: float) -> None:
        lateness = self._lateness
        while lateness and lateness[0][0] <= now:
            _, _, ticket = heapq.heappop(lateness)
            if ticket.lane == ON_TIME:
                ticket.lane = LATE
                ticket.asked = -1  # late is a new state: the policy's answer may differ
                heapq.heappush(self._late, (ticket.priority, float(ticket.seq), ticket.seq, ticket))

    def evictable(self, now: float) -> Ticket | None:
        """The ticket a full line refuses to make room for a new one, or None (refuse the new one).

        ``deadline`` order: the oldest request that can no longer meet its TTFT target.
        """
        if self.order != "deadline":
            return None
        self._turn_late(now)
        while self._late and self._late[0][3].lane != LATE:
            heapq.heappop(self._late)
        return self._late[0][3] if self._late else None

    def expired(self, now: float) -> list[Ticket]:
        """Tickets whose request deadline has passed, taken out of line."""
        out = []
        deadlines = self._deadlines
        while deadlines and (deadlines[0][2].lane == NOT_WAITING or deadlines[0][0] <= now):
            _, _, ticket = heapq.heappop(deadlines)
            if ticket.lane != NOT_WAITING:
                self.remove(ticket)
                out.append(ticket)
        return out

    def next_deadline(self) -> float | None:
        """The earliest request deadline in line, if anyone waits."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].lane == NOT_WAITING:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    def drain(self) -> list[Ticket]:
        """Every waiting ticket, taken out of line, in arrival order."""
        out = sorted((t for *_, t in self._deadlines if t.lane != NOT_WAITING), key=lambda t: t.seq)
        for ticket in out:
            self.remove(ticket)
        self._on_time, self._late, self._lateness, self._deadlines = [], [], [], []
        return out
