"""The waiting line: its order, its lanes, promotions, shedding, deadlines, and that it stays small."""

from __future__ import annotations

from syshaxd.core import Ticket, WaitingLine
from syshaxd.core.line import PROMOTED
from syshaxd.core.ticket import LATE, ON_TIME
from syshaxd.routing import ServiceLevel
from tests.core.world import features

BATCH = ServiceLevel("batch", ttft=60.0, tpot=1.0, priority=1)
SHED = ServiceLevel("sheddable", priority=2, sheddable=True)


def _ticket(name: str, arrived: float, level: ServiceLevel | None = None, timeout: float = 600.0) -> Ticket:
    level = level or ServiceLevel()
    return Ticket(name, features(name, level=level), arrived, arrived + timeout, priority=level.priority)


def _order(line: WaitingLine, now: float) -> list[str]:
    out = []
    line.advance(now)
    while (head := line.head()) is not None:
        out.append(head.request_id)
        line.remove(head)
    return out


def test_fifo_offers_room_by_priority_then_arrival() -> None:
    line = WaitingLine(10)
    for name, at, level in (("batch", 0.0, BATCH), ("a", 1.0, None), ("b", 2.0, None)):
        line.push(_ticket(name, at, level), now=at)
    assert _order(line, now=10.0) == ["a", "b", "batch"]  # nothing is late in a fifo line


def test_a_request_that_waited_long_enough_goes_first_whatever_its_class() -> None:
    line = WaitingLine(10, promote_after=30.0)
    old = _ticket("batch", 0.0, BATCH)
    line.push(old, now=0.0)
    for i in range(5):
        line.push(_ticket(f"i{i}", 20.0 + i), now=20.0 + i)
    old.asked = 3
    line.advance(29.0)
    assert line.head() is not old
    line.advance(30.0)
    assert line.head() is old and old.priority == PROMOTED and old.asked == -1


def test_deadline_order_puts_late_requests_behind_those_still_on_time_and_asks_them_again() -> None:
    line = WaitingLine(10, order="deadline", ttft_target=5.0)
    old, fresh = _ticket("old", 0.0), _ticket("fresh", 3.0)
    line.push(old, now=0.0)
    line.push(fresh, now=3.0)
    old.asked = 7
    assert line.advance(4.0) == [] and line.head() is old and old.lane == ON_TIME
    assert line.advance(6.0) == [old] and line.head() is fresh  # old turned late at 5 s
    assert old.lane == LATE and old.asked == -1  # a new state: the policy may answer otherwise
    assert line.evictable(_ticket("new", 6.0)) is old
    line.remove(fresh)
    assert line.head() is old


def test_each_class_turns_late_by_its_own_ttft_target() -> None:
    line = WaitingLine(10, order="deadline", ttft_target=5.0)
    batch, chat = _ticket("batch", 0.0, BATCH), _ticket("chat", 0.0)
    line.push(batch, now=0.0)
    line.push(chat, now=0.0)
    assert line.next_lateness() == 5.0
    assert line.advance(6.0) == [chat]
    assert line.next_lateness() == 60.0 and batch.lane == ON_TIME


def test_a_full_line_sheds_the_least_important_sheddable_request_for_a_request_that_is_not() -> None:
    line = WaitingLine(3)
    waiting = [_ticket("s0", 0.0, SHED), _ticket("s1", 1.0, SHED), _ticket("chat", 2.0)]
    for t in waiting:
        line.push(t, now=t.arrived)
    assert line.evictable(_ticket("chat2", 3.0)) is waiting[1]  # the newest sheddable one
    assert line.evictable(_ticket("s2", 3.0, SHED)) is None  # a sheddable newcomer is refused itself
    line.remove(waiting[1])
    line.remove(waiting[0])
    assert line.evictable(_ticket("chat3", 4.0)) is None  # fifo: nothing left to shed


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
    assert line.head() is old
    line.reorder("deadline", 5.0, now=10.0)
    assert line.head() is fresh and line.evictable(_ticket("new", 10.0)) is old


def test_the_line_stays_within_a_bound_however_many_pass_through_it() -> None:
    line = WaitingLine(100, order="deadline", ttft_target=5.0)
    for i in range(10_000):
        t = _ticket(str(i), float(i), SHED if i % 3 == 0 else None)
        line.push(t, now=float(i))
        line.advance(float(i))
        head = line.head()
        assert head is t
        line.remove(head)
    heaps = [line._deadlines, line._on_time, line._late, line._lateness, line._promotions, line._shed]
    assert len(line) == 0 and max(len(h) for h in heaps) <= 65, [len(h) for h in heaps]


def test_drain_empties_the_line_in_arrival_order() -> None:
    line = WaitingLine(10, order="deadline", ttft_target=1.0)
    tickets = [_ticket(str(i), float(i)) for i in range(4)]
    for t in tickets:
        line.push(t, now=t.arrived)
    assert line.drain() == tickets and len(line) == 0 and line.head() is None
