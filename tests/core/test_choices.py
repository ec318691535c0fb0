"""A request with n choices is booked as the n sequences the engine runs, and never split."""

from __future__ import annotations

from syshaxd.core import Placement
from syshaxd.routing import Decision, Mode
from syshaxd.snapshot import Device
from tests.core.world import World, features, upto, view


def _box(device: Device = "gpu", mode: Mode = Mode.WHOLE, most: int = 100) -> World:
    return World([view("gpu0", "gpu"), view("cpu0", "cpu")], upto(device, most, mode))


def test_n_choices_are_n_sequences_in_flight_and_n_times_the_tokens_to_write_with_the_prompt_once() -> None:
    core = _box().scheduler()
    ticket = core.ticket("a", features("a", prompt=300, max_tokens=40, n=4), now=0.0)
    assert isinstance(core.arrive(ticket, now=0.0), Placement)
    book = core.ledger.engines["gpu0"]
    assert (book.inflight, book.scheduled, book.prompt_tokens, book.decode_tokens) == (4, 4, 300, 160)
    view_ = core.snapshot(now=0.0).engine("gpu0")
    assert view_ is not None and (view_.inflight, view_.inflight_decode_tokens) == (4, 160)
    core.first_byte(ticket, "gpu0", now=1.0)
    assert (book.inflight, book.scheduled, book.prompt_tokens) == (4, 0, 0)
    assert core.snapshot(now=2.0).engine("gpu0").running == 4  # type: ignore[union-attr]
    core.finish(ticket, now=3.0)
    assert (book.inflight, book.scheduled, book.prompt_tokens, book.decode_tokens, book.answers) == (0, 0, 0, 0, {})


def test_n_choices_fill_a_batch_limit_as_n_requests_do() -> None:
    # A policy that holds at 4 sequences: after one request of n=4, the next waits.
    core = _box(most=4).scheduler()
    first = core.ticket("a", features("a", n=4), now=0.0)
    assert isinstance(core.arrive(first, now=0.0), Placement)
    second = core.ticket("b", features("b"), now=0.0)
    assert core.arrive(second, now=0.0) is None and core.waiting == 1
    core.release(first, "gpu0", now=1.0)
    assert isinstance(second.placement, Placement)


def test_n_choices_cost_n_shares_of_the_engines_time() -> None:
    # Alone on the engine for 2 s: a request of n=3 holds all of it, 3 sequences x 2 s / 3.
    core = _box().scheduler()
    solo = core.ticket("solo", features("solo"), now=0.0)
    core.arrive(solo, now=0.0)
    many = core.ticket("many", features("many", n=3), now=0.0)
    core.arrive(many, now=0.0)
    core.finish(solo, now=4.0)
    core.finish(many, now=4.0)
    # 4 sequences shared 4 s: one each second of the engine's time per sequence.
    assert abs(solo.shares["gpu0"] - 1.0) < 1e-9 and abs(many.shares["gpu0"] - 3.0) < 1e-9


def test_a_split_of_n_choices_runs_whole_on_the_decode_side_and_says_why() -> None:
    core = _box("cpu", Mode.PD_SPLIT).scheduler()
    single = core.arrive(core.ticket("one", features("one"), now=0.0), now=0.0)
    assert isinstance(single, Placement) and single.decision.mode is Mode.PD_SPLIT
    assert single.engines == ("gpu0", "cpu0")
    several = core.arrive(core.ticket("two", features("two", n=2), now=0.0), now=0.0)
    assert isinstance(several, Placement) and several.engines == ("cpu0",)
    assert (several.decision.device, several.decision.mode) == ("cpu", Mode.WHOLE)
    assert several.decision.reason.startswith("n=2 choices, whole on cpu: a split hands over one sequence")
    assert several.decision.reason.endswith("cpu has room")


def test_a_forced_split_of_n_choices_runs_whole_too() -> None:
    def anywhere(snap: object, req: object, limits: object) -> Decision:
        return Decision("gpu", Mode.WHOLE, None, "gpu has room")
    world = World([view("gpu0", "gpu"), view("cpu0", "cpu")], anywhere)  # type: ignore[arg-type]
    core = world.scheduler()
    forced = core.arrive(core.ticket("f", features("f", n=3, forced_mode=Mode.PD_SPLIT), now=0.0), now=0.0)
    assert isinstance(forced, Placement) and forced.engines == ("cpu0",)
    assert forced.decision.mode is Mode.WHOLE and "n=3 choices" in forced.decision.reason
    assert "pd_disagg requested" in forced.decision.reason
