"""The daemon's admission queue: FIFO by default, deadline order for adaptive."""

from __future__ import annotations

import asyncio

import pytest

from syshaxd.conductor.admission import AdmissionQueue
from syshaxd.errors import ApiError


class Clock:
    """A hand-moved monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _line_up(queue: AdmissionQueue[str], clock: Clock, names: list[tuple[str, float]],
                   slots: list[int]) -> list[asyncio.Task[str]]:
    """Waiters arriving at the given times; each takes one of ``slots[0]`` when offered one."""
    def route(name: str) -> str | None:
        if slots[0] <= 0:
            return None
        slots[0] -= 1
        return name

    tasks = []
    for name, at in names:
        clock.now = at
        tasks.append(asyncio.create_task(queue.admit(lambda n=name: route(n))))  # type: ignore[misc]
        await asyncio.sleep(0)
    return tasks


@pytest.mark.parametrize(("order", "first"), [("fifo", "old"), ("deadline", "fresh")])
def test_capacity_goes_to_the_oldest_waiter_or_to_the_oldest_still_on_time(order: str, first: str) -> None:
    async def scenario() -> list[str]:
        clock, slots = Clock(), [0]
        queue: AdmissionQueue[str] = AdmissionQueue(10, order=order, ttft_target=5.0, clock=clock)  # type: ignore[arg-type]
        tasks = await _line_up(queue, clock, [("old", 0.0), ("fresh", 8.0)], slots)
        clock.now = 10.0  # "old" has waited 10 s (past the 5 s target), "fresh" 2 s
        slots[0] = 1
        queue.kick()
        await asyncio.sleep(0)
        admitted = [t.result() for t in tasks if t.done()]
        assert len(queue) == 1
        for t in tasks:
            t.cancel()
        return admitted

    assert asyncio.run(scenario()) == [first]


def test_a_full_deadline_queue_refuses_its_late_waiter_and_a_fifo_queue_the_newcomer() -> None:
    async def scenario(order: str) -> tuple[str, str]:
        clock = Clock()
        queue: AdmissionQueue[str] = AdmissionQueue(1, order=order, ttft_target=5.0, clock=clock)  # type: ignore[arg-type]
        (old,) = await _line_up(queue, clock, [("old", 0.0)], [0])
        clock.now = 9.0
        try:
            new = asyncio.create_task(queue.admit(lambda: None))
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        except ApiError:
            return "new refused", ""
        if new.done() and isinstance(new.exception(), ApiError):
            old.cancel()
            return "new refused", ""
        assert old.done() and isinstance(old.exception(), ApiError) and old.exception().status == 429  # type: ignore[union-attr]
        new.cancel()
        return "old refused", ""

    assert asyncio.run(scenario("deadline"))[0] == "old refused"
    assert asyncio.run(scenario("fifo"))[0] == "new refused"
