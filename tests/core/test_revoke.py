"""A sheddable request gives up its GPU slot before its first byte rather than let the core
refuse a request that is not sheddable for want of room."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sim.profile import load_profile
from sim.runner import EngineSpec, RunOptions, VirtualConductor
from sim.traces import TraceRequest
from syshaxd.core import Outcome, Placement, Refusal, Scheduler, Ticket
from syshaxd.routing import DEFAULT_LEVEL, Limits, Mode, Policy, ServiceLevel
from tests.core.world import World, features, upto, view

SHED = ServiceLevel("sheddable", priority=2, sheddable=True)
BATCH = ServiceLevel("batch", ttft=60.0, tpot=1.0, priority=1)


@dataclass
class Driver:
    """A driver of the core that can take back what it placed: it hears every outcome and revoke."""

    core: Scheduler
    woken: dict[str, Outcome] = field(default_factory=dict)
    revoked: dict[str, Refusal] = field(default_factory=dict)
    tickets: dict[str, Ticket] = field(default_factory=dict)

    def arrive(self, name: str, now: float, level: ServiceLevel = DEFAULT_LEVEL, revocable: bool = True,
               **kw: object) -> Outcome | None:
        ticket = self.core.ticket(name, features(name, level=level, **kw), now)
        if revocable:
            ticket.revoke = lambda refusal: self.revoked.setdefault(name, refusal)  # type: ignore[misc]
        self.tickets[name] = ticket
        return self.core.arrive(ticket, now, wake=lambda o: self.woken.setdefault(name, o))  # type: ignore[misc]


def _driver(rule: Policy, queue_limit: int = 1, order: str | None = None) -> Driver:
    world = World([view("gpu0", "gpu"), view("cpu0", "cpu")], rule)
    return Driver(world.scheduler(queue_limit=queue_limit, order=order))


def _gpu(driver: Driver) -> tuple[int, int, int]:
    book = driver.core.ledger.engines["gpu0"]
    return book.inflight, book.scheduled, book.prompt_tokens


def test_a_full_line_takes_back_a_gpu_slot_from_a_sheddable_request_before_its_first_byte() -> None:
    d = _driver(upto("gpu", 2))
    for name in ("s1", "s2"):
        assert isinstance(d.arrive(name, 0.0, SHED, prompt=500), Placement)
    assert d.arrive("chat1", 1.0) is None  # the line (one place) is full now
    assert _gpu(d) == (2, 2, 1000)
    assert d.arrive("chat2", 2.0, prompt=100) is None  # it waits instead of a 429: s2 gave up its slot
    assert list(d.revoked) == ["s2"]
    refusal = d.revoked["s2"]
    assert (refusal.status, refusal.reason, refusal.retry_after) == (429, "shed", 1)
    assert "gave up its GPU slot" in refusal.message and "'sheddable'" in refusal.message
    s2 = d.tickets["s2"]
    assert s2.revoked and s2.done and s2.holds == set() and s2.refusal is refusal and s2.revoke is None
    placed = d.woken["chat1"]  # the room went to the line: its head took the slot
    assert isinstance(placed, Placement) and placed.engines == ("gpu0",) and placed.waited
    assert _gpu(d) == (2, 2, 600) and d.core.waiting == 1 and "s2" not in d.woken
    d.core.finish(s2, now=3.0)  # the driver ends it as it ends any request: nothing more to release
    assert _gpu(d) == (2, 2, 600)
    d.core.first_byte(d.tickets["s1"], "gpu0", now=4.0)
    d.core.finish(d.tickets["s1"], now=5.0)  # and the books still balance
    placed = d.woken["chat2"]
    assert isinstance(placed, Placement) and placed.engines == ("gpu0",)


def test_the_least_important_sheddable_request_gives_up_first_the_newest_among_equals() -> None:
    d = _driver(upto("gpu", 3), queue_limit=0)
    lesser = ServiceLevel("scraps", priority=5, sheddable=True)
    d.arrive("old", 0.0, SHED)
    d.arrive("scraps", 1.0, lesser)
    d.arrive("new", 2.0, SHED)
    placed = [d.arrive(f"chat{i}", 3.0 + i) for i in range(3)]  # a line of no places: each is placed at once
    assert list(d.revoked) == ["scraps", "new", "old"]
    assert [p.engines for p in placed] == [("gpu0",)] * 3  # type: ignore[union-attr]
    refused = d.arrive("chat3", 9.0)  # nothing left to give up: the old refusal
    assert isinstance(refused, Refusal) and refused.reason == "queue_full"


@pytest.mark.parametrize("why", ["started", "on the cpu", "split", "no driver", "newcomer sheddable"])
def test_a_request_that_cannot_give_up_a_gpu_slot_before_its_first_byte_keeps_it(why: str) -> None:
    rule = upto("cpu", 1) if why == "on the cpu" else upto("gpu", 1, mode=Mode.PD_SPLIT) if why == "split" \
        else upto("gpu", 1)
    d = _driver(rule)
    placed = d.arrive("s", 0.0, SHED, revocable=why != "no driver")
    assert isinstance(placed, Placement)
    if why == "started":
        d.core.first_byte(d.tickets["s"], "gpu0", now=0.5)
    assert d.arrive("waiting", 1.0, BATCH) is None
    refused = d.arrive("late", 2.0, SHED if why == "newcomer sheddable" else ServiceLevel())
    assert isinstance(refused, Refusal) and refused.reason == "queue_full"
    assert d.revoked == {} and d.tickets["s"].holds and not d.tickets["s"].done


def test_a_request_that_left_its_gpu_slot_is_not_taken_back() -> None:
    d = _driver(upto("gpu", 2))
    d.arrive("gone", 0.0, SHED)
    d.arrive("kept", 0.0, SHED)
    d.core.release(d.tickets["kept"], "gpu0", now=0.5)  # its part there is over (a split's prefill)
    d.core.finish(d.tickets["gone"], now=0.5)
    assert len(d.core.revocable) == 0


def test_a_gpu_slot_is_given_up_before_a_late_request_is_refused() -> None:
    d = _driver(upto("gpu", 1), order="deadline")
    d.arrive("s", 0.0, SHED)
    d.arrive("late", 0.0)
    # "late" waited 9 s of its 5 s target: a full line would refuse it. "s" gives up its slot instead,
    # which goes to "fresh", first in a deadline line as the one still on time.
    placed = d.arrive("fresh", 9.0)
    assert list(d.revoked) == ["s"] and isinstance(placed, Placement) and placed.engines == ("gpu0",)
    assert d.woken == {} and d.core.waiting == 1


def test_an_engine_taken_in_place_of_a_failed_one_on_the_gpu_can_be_given_up() -> None:
    d = _driver(upto("cpu", 1))
    d.arrive("s", 0.0, SHED)
    assert d.core.take_other(d.tickets["s"], "cpu0", now=0.5) == "gpu0"  # the CPU engine failed before a byte
    d.core.release(d.tickets["s"], "cpu0", now=0.5)
    assert isinstance(d.arrive("a", 1.0, BATCH), Placement)  # on the CPU
    assert d.arrive("b", 2.0) is None and d.revoked == {}
    assert d.arrive("c", 3.0) is None and list(d.revoked) == ["s"]
    assert _gpu(d)[0] == 0


def test_the_runner_drops_a_request_taken_back_from_its_virtual_engine_and_counts_it_shed() -> None:
    profile = load_profile("tiny")
    engines = [EngineSpec("gpu0", "gpu", profile), EngineSpec("cpu0", "cpu", profile)]
    # Long prompts: their prefill (~0.3 s on this engine) is still under way when the interactive
    # requests come, 10 ms apart, to a line of one place.
    trace = [TraceRequest(0.0, 1500, 20, level=SHED), TraceRequest(0.001, 1500, 20, level=SHED),
             TraceRequest(0.01, 100, 20), TraceRequest(0.02, 100, 20)]
    conductor = VirtualConductor(engines, "classic", Limits(gpu_max_batch_size=2, cpu_max_batch_size=0),
                                 RunOptions(max_queue=1, startup_check=False))
    result = conductor.run(trace)
    fates = [(r.outcome, r.refusal, r.engines, r.output_tokens) for r in result.requests]
    assert fates == [("ok", "", "gpu0", 20), ("rejected", "shed", "gpu0", 0), ("ok", "", "gpu0", 20),
                     ("ok", "", "gpu0", 20)]
    assert result.decisions["revoked"] == 1
    assert conductor.engines["gpu0"].core.counters.finished.get("abort") == 1  # type: ignore[attr-defined]
    assert result.summary.classes["sheddable"].refusals == {"shed": 1}
