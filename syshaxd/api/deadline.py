"""A connection's one deadline, on one timer that moves only when the deadline comes sooner.

A connection always waits for at most one thing with a time limit (the rest of a head, the
next piece of a body, the next request, the client reading its answer). Setting and clearing
that deadline is an assignment; the loop's timer is replaced only when a deadline comes
sooner than the timer, and a timer that fires before a deadline that moved later sets itself
again. So most requests touch no timer at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadline:
    """When the awaited thing must have happened, and what it is; ``expired(kind)`` is called past it."""

    __slots__ = ("_at", "_expired", "_loop", "_timer", "_timer_at", "kind")

    def __init__(self, loop: asyncio.AbstractEventLoop, expired: Callable[[str], None]) -> None:
        self._loop = loop
        self._expired = expired
        self._at: float | None = None
        self.kind = ""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def set(self, when: float, kind: str) -> None:
        """The deadline is ``when`` (loop time), for ``kind``."""
        self._at, self.kind = when, kind
        if self._timer is None or when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = self._loop.call_at(when, self._fire)

    def clear(self) -> None:
        """No deadline (the timer, if any, finds none when it fires)."""
        self._at = None

    def cancel(self) -> None:
        """No deadline, and no timer (the connection is gone)."""
        self._at = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        at = self._at
        if at is None:
            return
        if self._loop.time() < at:
            self._timer_at = at
            self._timer = self._loop.call_at(at, self._fire)
            return
        self._at = None
        self._expired(self.kind)
