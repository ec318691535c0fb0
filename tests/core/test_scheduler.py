"""The scheduling core decides with time as an argument: admission, placement, the books, release."""

from __future__ import annotations

import pytest

from syshaxd.core import Outcome, Placement, Refusal
from syshaxd.routing import Decision, Limits, Mode, Policy, RequestFeatures, ServiceLevel
from syshaxd.snapshot import EngineState, Snapshot
from tests.core.world import World, features, upto, view


def _gpu_cpu(rule: Policy | None = None) -> World:
    return World([view("gpu0", "gpu"), view("cpu0", "cpu"), view("cpu1", "cpu")], rule or upto("gpu", 1))


def test_a_request_with_room_is_placed_at_once_and_counted_against_its_engine() -> None:
    world = _gpu_cpu()
    core = world.scheduler()
    ticket = core.ticket("a", features("a", prompt=300, max_tokens=40), now=0.0)
    outcome = core.arrive(ticket, now=0.0)
    assert isinstance(outcome, Placement) and outcome.engines == ("gpu0",) and not outcome.waited
    book = core.ledger.engines["gpu0"]
    assert (book.inflight, book.scheduled, book.prompt_tokens, book.decode_tokens) == (1, 1, 300, 40)
    core.first_byte(ticket, "gpu0", now=1.0)
    assert (book.scheduled, book.prompt_tokens) == (0, 0)
    assert core.snapshot(now=3.0).engine("gpu0").answers == ((2.0, 40),)  # type: ignore[union-attr]
    core.finish(ticket, now=4.0)
    core.finish(ticket, now=5.0)  # once: the second changes nothing
    assert (book.inflight, book.decode_tokens, book.answers) == (0, 0, {})


def test_a_held_request_waits_and_is_woken_with_its_placement_when_room_comes_back() -> None:
    world = _gpu_cpu()
    core = world.scheduler()
    first = core.ticket("a", features("a"), now=0.0)
    core.arrive(first, now=0.0)
    woken: list[Outcome] = []
    second = core.ticket("b", features("b"), now=1.0)
    assert core.arrive(second, now=1.0, wake=woken.append) is None
    assert core.waiting == 1 and second.held == "gpu full"
    core.release(first, "gpu0", now=7.0)
    (outcome,) = woken
    assert isinstance(outcome, Placement) and outcome.engines == ("gpu0",) and outcome.waited
    assert core.waiting == 0 and second.decided == 7.0


def test_a_waiting_request_is_asked_once_per_change_of_state() -> None:
    world = _gpu_cpu()
    core = world.scheduler(queue_limit=100)
    running = core.ticket("run", features("run"), now=0.0)
    core.arrive(running, now=0.0)
    for i in range(20):
        core.arrive(core.ticket(f"w{i}", features(f"w{i}"), now=1.0), now=1.0)
    assert world.calls == ["run", "w0"]  # the first in line was asked; the others wait behind it
    world.calls.clear()
    for _ in range(5):
        core.kick(now=2.0)  # nothing changed: nobody is asked again
    assert world.calls == []
    world._snap = None  # a new scrape
    core.kick(now=3.0)
    assert world.calls == ["w0"]
    world.calls.clear()
    core.release(running, "gpu0", now=4.0)  # room for one: w0 goes, w1 is asked once and held
    assert world.calls == ["w0", "w1"]


def test_the_policys_engine_is_honoured_only_while_it_is_usable() -> None:
    world = _gpu_cpu(upto("cpu", 9, engine="cpu1"))
    core = world.scheduler()
    placed = core.arrive(core.ticket("a", features("a"), now=0.0), now=0.0)
    assert isinstance(placed, Placement) and placed.engines == ("cpu1",)
    world.set_state("cpu1", EngineState.DOWN)
    placed = core.arrive(core.ticket("b", features("b"), now=1.0), now=1.0)
    assert isinstance(placed, Placement) and placed.engines == ("cpu0",)
    world.flags["cpu0"] = (True, True)  # draining
    world.set_state("cpu1", EngineState.UP)
    placed = core.arrive(core.ticket("c", features("c"), now=2.0), now=2.0)
    assert isinstance(placed, Placement) and placed.engines == ("cpu1",)


def test_a_device_without_a_usable_engine_hands_the_request_to_the_other_whole() -> None:
    world = _gpu_cpu(upto("cpu", 9, mode=Mode.PD_SPLIT))
    core = world.scheduler()
    split = core.arrive(core.ticket("a", features("a"), now=0.0), now=0.0)
    assert isinstance(split, Placement) and split.engines == ("gpu0", "cpu0") and split.decision.mode is Mode.PD_SPLIT
    world.set_state("gpu0", EngineState.DOWN)
    whole = core.arrive(core.ticket("b", features("b"), now=1.0), now=1.0)
    assert isinstance(whole, Placement) and whole.decision.mode is Mode.WHOLE and whole.engines == ("cpu1",)
    assert whole.decision.reason.startswith("no usable gpu engine for a split, whole on cpu")
    gpu_left = World([view("gpu0", "gpu"), view("cpu0", "cpu", EngineState.DOWN)], upto("cpu", 9))
    core = gpu_left.scheduler()
    moved = core.arrive(core.ticket("c", features("c"), 0.0), now=0.0)
    assert isinstance(moved, Placement) and moved.engines == ("gpu0",)
    assert moved.decision.reason.startswith("cpu unavailable, using gpu")


def test_no_usable_engine_anywhere_is_a_503_that_names_each_engine() -> None:
    world = World([view("gpu0", "gpu", EngineState.DOWN), view("cpu0", "cpu")], upto("gpu", 0))
    world.flags["cpu0"] = (False, False)
    core = world.scheduler()
    refused = core.arrive(core.ticket("a", features("a"), 0.0), now=0.0)
    assert isinstance(refused, Refusal) and (refused.status, refused.reason) == (503, "no_engine")
    assert refused.message == "no engine can take requests: gpu0 (gpu) is down; cpu0 (cpu) is disabled"


def test_a_prompt_goes_to_an_engine_whose_kv_cache_holds_it_and_to_the_named_one_when_none_does() -> None:
    world = World([view("small", "gpu", capacity=1000), view("big", "gpu", capacity=9000)],
                  upto("gpu", 9, engine="small"))
    core = world.scheduler()
    long = core.arrive(core.ticket("a", features("a", prompt=4000), 0.0), now=0.0)
    short = core.arrive(core.ticket("b", features("b", prompt=500), 0.0), now=0.0)
    huge = core.arrive(core.ticket("c", features("c", prompt=20000), 0.0), now=0.0)
    assert [o.engines for o in (long, short, huge)] == [("big",), ("small",), ("small",)]  # type: ignore[union-attr]


@pytest.mark.parametrize(("order", "refused"), [("fifo", "new"), ("deadline", "old")])
def test_a_full_fifo_line_refuses_the_newcomer_and_a_deadline_line_its_oldest_late_request(
        order: str, refused: str) -> None:
    world = _gpu_cpu(upto("gpu", 0))
    core = world.scheduler(queue_limit=1, order=order)
    outcomes: dict[str, Outcome] = {}
    core.arrive(core.ticket("old", features("old"), 0.0), now=0.0, wake=lambda o: outcomes.setdefault("old", o))
    new = core.arrive(core.ticket("new", features("new"), 9.0), now=9.0)  # "old" has waited 9 s of 5
    if new is not None:
        outcomes["new"] = new
    (who, outcome), = outcomes.items()
    assert who == refused and isinstance(outcome, Refusal) and outcome.status == 429
    assert outcome.retry_after == 1 and "queue is full (1 waiting)" in outcome.message


@pytest.mark.parametrize(("order", "first"), [("fifo", "late"), ("deadline", "fresh")])
def test_the_deadline_line_offers_room_to_the_oldest_request_still_on_time_first(order: str, first: str) -> None:
    world = _gpu_cpu()
    core = world.scheduler(order=order)
    running = core.ticket("run", features("run"), 0.0)
    core.arrive(running, now=0.0)
    woken: list[str] = []
    core.arrive(core.ticket("late", features("late"), 0.0), now=0.0, wake=lambda o: woken.append("late"))
    core.arrive(core.ticket("fresh", features("fresh"), 8.0), now=8.0, wake=lambda o: woken.append("fresh"))
    core.release(running, "gpu0", now=10.0)  # "late" waited 10 s of a 5 s target, "fresh" 2 s
    assert woken == [first]


def test_a_request_still_waiting_at_its_deadline_is_refused_with_a_504() -> None:
    world = _gpu_cpu(upto("gpu", 0))
    core = world.scheduler(timeout=30.0)
    woken: list[Outcome] = []
    ticket = core.ticket("a", features("a"), now=5.0)
    core.arrive(ticket, now=5.0, wake=woken.append)
    assert core.next_deadline() == 10.0  # it turns late (its class serves late work: it waits on)
    core.expire(now=10.0)
    assert core.next_deadline() == 35.0
    core.expire(now=34.9)
    assert woken == []
    core.expire(now=35.0)
    (refused,) = woken
    assert isinstance(refused, Refusal) and (refused.status, refused.reason) == (504, "queue_timeout")
    assert refused.message == "no capacity within system.request_timeout (30 s)"
    assert core.waiting == 0 and core.next_deadline() is None


def test_a_class_that_refuses_late_work_is_refused_when_its_ttft_target_passes_in_line() -> None:
    world = _gpu_cpu(upto("gpu", 0))
    core = world.scheduler()
    woken: list[Outcome] = []
    strict = ServiceLevel("realtime", ttft=2.0, late="refuse")
    core.arrive(core.ticket("a", features("a", level=strict), now=1.0), now=1.0, wake=woken.append)
    core.arrive(core.ticket("b", features("b"), now=1.0), now=1.0, wake=woken.append)
    assert core.next_deadline() == 3.0
    core.expire(now=3.0)
    (refused,) = woken
    assert isinstance(refused, Refusal) and (refused.status, refused.reason) == (429, "ttft_expired")
    assert "class 'realtime'" in refused.message and core.waiting == 1


def test_a_full_line_sheds_a_sheddable_request_for_one_that_is_not() -> None:
    world = _gpu_cpu(upto("gpu", 0))
    core = world.scheduler(queue_limit=2)
    woken: dict[str, Outcome] = {}
    shed = ServiceLevel("sheddable", priority=2, sheddable=True)
    for name, level in (("s", shed), ("chat", ServiceLevel())):
        core.arrive(core.ticket(name, features(name, level=level), 0.0), now=0.0,
                    wake=lambda o, n=name: woken.setdefault(n, o))  # type: ignore[misc]
    assert core.arrive(core.ticket("s2", features("s2", level=shed), 1.0), now=1.0).reason == "queue_full"  # type: ignore[union-attr]
    assert core.arrive(core.ticket("chat2", features("chat2"), 1.0), now=1.0) is None
    assert list(woken) == ["s"] and woken["s"].reason == "shed" and core.waiting == 2  # type: ignore[union-attr]


def test_the_policy_is_asked_with_the_requests_own_targets() -> None:
    seen: dict[str, tuple[float, float]] = {}

    def note(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        seen[req.request_id] = (limits.ttft_target, limits.tpot_target)
        return upto("gpu", 9)(snap, req, limits)

    core = World([view("gpu0", "gpu")], note).scheduler()
    levels = {"chat": ServiceLevel(), "batch": ServiceLevel("batch", ttft=60.0, tpot=1.0),
              "report": ServiceLevel("report", ttft=30.0, deadline=130.0)}
    for name, level in levels.items():
        core.arrive(core.ticket(name, features(name, max_tokens=101, level=level), 0.0), now=0.0)
    assert seen == {"chat": (5.0, 0.2), "batch": (60.0, 1.0), "report": (30.0, 1.0)}


def test_a_forced_split_runs_as_a_split_wherever_the_policy_would_have_put_it() -> None:
    world = _gpu_cpu(upto("gpu", 9))
    core = world.scheduler()
    placed = core.arrive(core.ticket("a", features("a", forced_mode=Mode.PD_SPLIT), 0.0), now=0.0)
    assert isinstance(placed, Placement) and placed.decision.mode is Mode.PD_SPLIT
    assert placed.engines == ("gpu0", "cpu0") and placed.decision.reason.startswith("pd_disagg requested")


def test_an_engine_failing_before_any_byte_gets_one_engine_of_the_other_device() -> None:
    world = _gpu_cpu()
    core = world.scheduler()
    ticket = core.ticket("a", features("a"), 0.0)
    core.arrive(ticket, now=0.0)
    assert core.release(ticket, "gpu0", now=1.0)
    assert not core.release(ticket, "gpu0", now=1.0)  # released once
    assert core.take_other(ticket, "gpu0", now=1.0) == "cpu0"
    assert core.take_other(ticket, "cpu0", now=2.0) is None  # once per request
    assert core.ledger.inflight() == {"gpu0": 0, "cpu0": 1, "cpu1": 0}


def test_stopping_refuses_every_waiting_request_and_every_new_one() -> None:
    world = _gpu_cpu(upto("gpu", 0))
    core = world.scheduler()
    woken: list[Outcome] = []
    core.arrive(core.ticket("a", features("a"), 0.0), now=0.0, wake=woken.append)
    core.stop()
    later = core.arrive(core.ticket("b", features("b"), 1.0), now=1.0)
    assert [(o.status, o.reason) for o in (*woken, later)] == [(503, "stopping")] * 2  # type: ignore[union-attr]


def test_the_policy_is_told_how_long_a_waiting_request_waited() -> None:
    seen: dict[str, float] = {}

    def note(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        seen[req.request_id] = req.waited
        return upto("gpu", 1)(snap, req, limits)

    world = World([view("gpu0", "gpu")], note)
    core = world.scheduler()
    first = core.ticket("a", features("a"), 0.0)
    core.arrive(first, now=0.0)
    core.arrive(core.ticket("b", features("b"), 0.5), now=0.5)
    core.release(first, "gpu0", now=6.5)
    assert seen == {"a": 0.0, "b": 6.0}


def test_a_wake_that_ends_a_request_at_once_lets_the_next_one_in() -> None:
    # A driver whose engine refuses a placed request finishes it inside the wake callback:
    # the core goes round again instead of losing the room it gave back.
    world = _gpu_cpu()
    core = world.scheduler()
    running = core.ticket("run", features("run"), 0.0)
    core.arrive(running, now=0.0)
    refused = core.ticket("x", features("x"), 0.0)
    core.arrive(refused, now=0.0, wake=lambda o: core.finish(refused, now=1.0))
    placed: list[Outcome] = []
    core.arrive(core.ticket("y", features("y"), 0.0), now=0.0, wake=placed.append)
    core.release(running, "gpu0", now=1.0)
    assert len(placed) == 1 and isinstance(placed[0], Placement)


def test_each_engine_shows_the_tightest_tpot_target_its_requests_were_placed_under() -> None:
    core = World([view("gpu0", "gpu")], upto("gpu", 9)).scheduler()
    loose, tight = ServiceLevel("batch", tpot=1.0), ServiceLevel("realtime", tpot=0.05)
    batch = core.ticket("b", features("b", level=loose), 0.0)
    realtime = core.ticket("r", features("r", level=tight), 0.0)
    plain = core.ticket("p", features("p"), 0.0)
    for ticket in (batch, realtime, plain):
        core.arrive(ticket, now=0.0)

    def tightest() -> float | None:
        return core.snapshot(1.0).engines[0].tightest_tpot

    assert tightest() == 0.05
    core.finish(realtime, now=1.0)
    assert tightest() == 0.2  # the plain request runs on the decider's target
    core.finish(plain, now=2.0)
    assert tightest() == 1.0
    core.finish(batch, now=3.0)
    assert tightest() is None


def test_each_request_is_given_its_share_of_the_engine_time_it_held() -> None:
    core = World([view("gpu0", "gpu")], upto("gpu", 9)).scheduler()
    a, b = core.ticket("a", features("a"), 0.0), core.ticket("b", features("b"), 0.0)
    core.arrive(a, now=0.0)
    core.arrive(b, now=2.0)  # a alone for 2 s, then both for 4 s: a 2 + 2, b 2, then b alone 3 s
    core.finish(a, now=6.0)
    core.finish(b, now=9.0)
    assert a.shares == {"gpu0": pytest.approx(4.0)} and b.shares == {"gpu0": pytest.approx(5.0)}
