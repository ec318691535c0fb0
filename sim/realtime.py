"""Runs an EngineCore against the wall clock (scaled by ``--speed``) for the HTTP server.

Each step is computed when its start time comes and its results are delivered when its
end time comes, so a streamed answer arrives token by token at the modelled pace. When
the host falls behind (a very fast profile, a very high speed) steps run back to back and
their tokens arrive together (a stream still sends one chunk per token).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from sim.core import EngineCore, Seq, SimRequest, StepResult

MAX_BEHIND_STEPS = 32  # steps run without yielding to the event loop when late
EXIT_SOFTWARE = 70  # sysexits.h EX_SOFTWARE


@dataclass(frozen=True)
class TokenEvent:
    """New tokens for one request, or its end (``choice``: which of a request's ``n`` sequences)."""

    tokens: int
    finish_reason: str | None = None
    choice: int = 0


def _crash_on_error(task: asyncio.Task[None]) -> None:
    # A bug in the stepping loop would leave every request hanging: fail loudly instead.
    if not task.cancelled() and task.exception() is not None:
        traceback.print_exception(task.exception(), file=sys.stderr)
        os._exit(EXIT_SOFTWARE)


class Handle:
    """A submitted request as its HTTP handler sees it.

    The sequences of one request with several choices share one queue of events, each event
    marked with its sequence's ``choice``.
    """

    def __init__(self, seq: Seq, events: asyncio.Queue[TokenEvent] | None = None, choice: int = 0) -> None:
        self.seq = seq
        self.events: asyncio.Queue[TokenEvent] = events if events is not None else asyncio.Queue()
        self.choice = choice

    @property
    def rid(self) -> str:
        """The request id inside the engine."""
        return self.seq.rid


class LiveEngine:
    """An EngineCore paced by a scaled wall clock."""

    def __init__(self, core: EngineCore, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.core = core
        self.speed = speed
        self._wall0 = time.monotonic()
        self._virt0 = core.now
        self._handles: dict[str, Handle] = {}
        self._wake = asyncio.Event()
        self._paused_at: float | None = None  # the virtual time the clock stopped at
        self._task: asyncio.Task[None] | None = None
        self.listeners: list[Callable[[StepResult], None]] = []
        self.started_at = time.time()

    def vnow(self) -> float:
        """Virtual seconds now (standing still while paused)."""
        if self._paused_at is not None:
            return self._paused_at
        return self._virt0 + (time.monotonic() - self._wall0) * self.speed

    def set_paused(self, paused: bool) -> None:
        """Stop the clock (no step starts; the one running ends) or let it go on from where it stopped."""
        if paused and self._paused_at is None:
            self._paused_at = self.vnow()
        elif not paused and self._paused_at is not None:
            self._virt0, self._wall0 = self._paused_at, time.monotonic()
            self._paused_at = None
        self._wake.set()

    def wall_delay(self, virtual_seconds: float) -> float:
        """Wall seconds a virtual duration takes."""
        return virtual_seconds / self.speed

    def start(self) -> None:
        """Start the stepping task on the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")
            self._task.add_done_callback(_crash_on_error)

    async def stop(self) -> None:
        """Stop stepping."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def submit(self, req: SimRequest, events: asyncio.Queue[TokenEvent] | None = None, choice: int = 0) -> Handle:
        """Queue a request now (``events``, ``choice``: another choice of a request already queued)."""
        seq = self.core.submit(req, at=self.vnow())
        handle = Handle(seq, events, choice)
        self._handles[req.rid] = handle
        self._wake.set()
        return handle

    def abort(self, rid: str) -> None:
        """Abort a request (its client went away) and free its blocks."""
        self._handles.pop(rid, None)
        self.core.abort(rid)
        self._wake.set()

    def wake(self) -> None:
        """Look at the queues again (blocks were freed from outside, e.g. a handoff was taken)."""
        self._wake.set()

    def forget(self, rid: str) -> None:
        """Stop delivering events for a request that ended normally."""
        self._handles.pop(rid, None)

    async def _sleep_until(self, virtual: float) -> None:
        delay = (virtual - self.vnow()) / self.speed
        if delay > 0:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass

    async def _run(self) -> None:
        behind = 0
        while True:
            if self._paused_at is not None:
                self._wake.clear()
                await self._wake.wait()
                continue
            self.core.expire_held(self.vnow())
            nxt = self.core.next_event_time()
            if nxt is None:
                self._wake.clear()
                timeout = 1.0 if self.core.held else None
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=timeout)
                except asyncio.TimeoutError:
                    pass
                continue
            if nxt > self.vnow():
                await self._sleep_until(nxt)
                continue
            if self.core.now < self.vnow() and not self.core.running:
                self.core.now = self.vnow()  # idle time passed
            result = self.core.step()
            if result is None:
                # queued work that cannot start (blocks held for a remote decode): wait for news
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=1.0)
                except asyncio.TimeoutError:
                    pass
                continue
            end = result.end
            await asyncio.sleep(max(0.0, (end - self.vnow()) / self.speed))
            self._deliver(result)
            behind += 1
            if behind >= MAX_BEHIND_STEPS or result.end - result.start <= 0:
                behind = 0
                await asyncio.sleep(0)

    def _deliver(self, result: StepResult) -> None:
        for listener in self.listeners:
            listener(result)
        finished = {id(s) for s in result.finished}
        for seq, n in result.tokens:
            handle = self._handles.get(seq.rid)
            if handle is not None and handle.seq is seq:
                reason = seq.finish_reason if id(seq) in finished else None
                handle.events.put_nowait(TokenEvent(n, reason, handle.choice))
        for seq in result.finished:
            handle = self._handles.get(seq.rid)
            if handle is not None and handle.seq is seq and not any(s is seq for s, _ in result.tokens):
                handle.events.put_nowait(TokenEvent(0, seq.finish_reason, handle.choice))
