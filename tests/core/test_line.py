"""The waiting line: its order, its lanes, its deadlines, and that it stays small."""

from __future__ import annotations

from syshaxd.core import Ticket, WaitingLine
from syshaxd.core.ticket import LATE, ON_TIME
from tests.core.world import features


def _ticket(name: str, arrived: float, priority: int = 0, timeout: float = 600.0) -> Ticket:
    return Ticket(name, features(name), arrived, arrived + timeout, priority=priority)


def test_fifo_offers_room_by_priority_then_arrival() -> None:
    line = WaitingLine(10)
    for name, at, prio in (("a", 0.0, 0), ("b", 1.0, 0), ("urgent", 2.0, -1)):
        line.push(_ticket(name, at, prio), now=at)
    order = []
    while (head := line.head(now=100.0)) is not None:
        order.append(head.request_id)
        line.remove(head)
    assert order == ["urgent", "a", "b"]  # nothing is ever late in a fifo line


def test_deadline_order_puts_late_requests_behind_those_still_on_time_and_asks_them_again() -> None:
    line = WaitingLine(10, order="deadline", ttft_target=5.0)
    old, fresh = _ticket("old", 0.0), _ticket("fresh", 3.0)
    line.push(old, now=0.0)
    line.push(fresh, now=3.0)
    old.asked = 7
    assert line.head(now=4.0) is old and old.lane == ON_TIME
    assert line.head(now=6.0) is fresh  # old turned late at 5 s
    assert old.lane == LATE and old.asked == -1  # a new state: the policy may answer otherwise
    assert line.evictable(now=6.0) is old
    line.remove(fresh)
    assert line.head(now=6.0) is old


def test_expired_takes_out_only_tickets_past_their_deadline() -> None:
    line = WaitingLine(10)
    a, b, gone = _ticket("a", 0.0, timeout=10), _ticket("b", 2.0, timeout=10), _ticket("gone", 1.0, timeout=10)
    for t in (a, gone, b):
        line.push(t, now=t.arrived)
    line.remove(gone)
    assert line.next_deadline() == 10.0
    assert line.expired(now=11.5) == [a]
    assert line.next_deadline() == 12.0 and len(line) == 1


def test_a_new_order_places_every_waiting_ticket_again() -> None:
    line = WaitingLine(10)
    old, fresh = _ticket("old", 0.0), _ticket("fresh", 8.0)
    line.push(old, now=0.0)
    line.push(fresh, now=8.0)
    assert line.head(now=10.0) is old
    line.reorder("deadline", 5.0, now=10.0)
    assert line.head(now=10.0) is fresh and line.evictable(now=10.0) is old


def test_the_line_stays_within_a_bound_however_many_pass_through_it() -> None:
    line = WaitingLine(100, order="deadline", ttft_target=5.0)
    for i in range(10_000):
        t = _ticket(str(i), float(i))
        line.push(t, now=float(i))
        head = line.head(now=float(i))
        assert head is t
        line.remove(head)
    sizes = [len(line._deadlines), len(line._on_time), len(line._late), len(line._lateness)]
    assert len(line) == 0 and max(sizes) <= 2 * 0 + 64 + 1, sizes


def test_drain_empties_the_line_in_arrival_order() -> None:
    line = WaitingLine(10, order="deadline", ttft_target=1.0)
    tickets = [_ticket(str(i), float(i)) for i in range(4)]
    for t in tickets:
        line.push(t, now=t.arrived)
    assert line.drain() == tickets and len(line) == 0 and line.head(now=9.0) is None
