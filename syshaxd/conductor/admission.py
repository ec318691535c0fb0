"""The admission queue: requests the policy has no capacity for wait here.

First in, first out by default; with ``order="deadline"`` (the ``adaptive`` policy's,
:mod:`syshaxd.policy.queueing`) capacity goes first to the oldest request that can still
meet the TTFT target, and a full queue refuses its oldest late request rather than a new
one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from syshaxd.errors import ApiError
from syshaxd.policy import QueueOrder, evict_index, next_index

T = TypeVar("T")


@dataclass
class _Waiter(Generic[T]):
    try_route: Callable[[], T | None]
    future: asyncio.Future[T]
    since: float = field(default=0.0)


class AdmissionQueue(Generic[T]):
    """A bounded FIFO of requests waiting for capacity.

    ``try_route`` decides and reserves capacity in one synchronous step, so two waiters
    woken together can never both take the last slot.
    """

    def __init__(self, max_size: int, order: QueueOrder = "fifo", ttft_target: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_size = max_size
        self.order: QueueOrder = order
        self.ttft_target = ttft_target
        self._clock = clock
        self._waiters: deque[_Waiter[T]] = deque()

    def __len__(self) -> int:
        return sum(1 for w in self._waiters if not w.future.done())

    def try_now(self, try_route: Callable[[], T | None]) -> T | None:
        """Route at once when nobody waits ahead and there is capacity; else None (wait with :meth:`admit`)."""
        if self._waiters:
            return None
        return try_route()

    async def admit(self, try_route: Callable[[], T | None], retry_after: int = 1) -> T:
        """Route now if there is capacity and nobody waits ahead, else wait in line.

        Raises:
            ApiError: 429 when the queue is full.
        """
        if not self._waiters:
            routed = try_route()
            if routed is not None:
                return routed
        if len(self) >= self.max_size:
            full = self._full_error(retry_after)
            late = self._evictable()
            if late is None:
                raise full
            late.future.set_exception(full)  # it cannot meet its TTFT target any more
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(try_route, future, self._clock())
        self._waiters.append(waiter)
        try:
            self.kick()  # capacity may have appeared while nobody was waiting
            return await future
        finally:
            if not waiter.future.done():
                waiter.future.cancel()
            try:
                self._waiters.remove(waiter)
            except ValueError:
                pass

    def _full_error(self, retry_after: int) -> ApiError:
        return ApiError(
            429,
            f"no capacity: all engines are at their limits and the admission queue is full "
            f"({self.max_size} waiting); retry later",
            type="rate_limit_exceeded",
            headers={"Retry-After": str(retry_after)},
        )

    def _live(self) -> list[_Waiter[T]]:
        return [w for w in self._waiters if not w.future.done()]

    def _evictable(self) -> _Waiter[T] | None:
        live = self._live()
        i = evict_index([w.since for w in live], self._clock(), self.ttft_target, self.order)
        return None if i is None else live[i]

    def kick(self) -> None:
        """Let waiters in, in queue order, while the policy finds capacity for the one offered it."""
        while self._waiters:
            live = self._live()
            if not live:
                self._waiters.clear()
                return
            head = live[next_index([w.since for w in live], self._clock(), self.ttft_target, self.order)]
            routed = head.try_route()
            if routed is None:
                return
            self._waiters.remove(head)
            head.future.set_result(routed)

    def fail_all(self, error: BaseException) -> None:
        """End every wait with ``error`` (shutdown)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(error)
