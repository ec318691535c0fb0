"""The admission queue: requests the policy has no capacity for wait here, first in, first out."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from syshaxd.errors import ApiError

T = TypeVar("T")


@dataclass
class _Waiter(Generic[T]):
    try_route: Callable[[], T | None]
    future: asyncio.Future[T]


class AdmissionQueue(Generic[T]):
    """A bounded FIFO of requests waiting for capacity.

    ``try_route`` decides and reserves capacity in one synchronous step, so two waiters
    woken together can never both take the last slot.
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
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
            raise ApiError(
                429,
                f"no capacity: all engines are at their limits and the admission queue is full "
                f"({self.max_size} waiting); retry later",
                type="rate_limit_exceeded",
                headers={"Retry-After": str(retry_after)},
            )
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(try_route, future)
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

    def kick(self) -> None:
        """Let waiters in, in order, while the policy finds capacity for the head of the line."""
        while self._waiters:
            head = self._waiters[0]
            if head.future.done():
                self._waiters.popleft()
                continue
            routed = head.try_route()
            if routed is None:
                return
            self._waiters.popleft()
            head.future.set_result(routed)

    def fail_all(self, error: BaseException) -> None:
        """End every wait with ``error`` (shutdown)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(error)
