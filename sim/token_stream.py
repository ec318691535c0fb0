"""A streamed body as its tokens come: batched writes, the client going away, a mid-stream death.

Both streamed answers (chat/completions chunks, :mod:`sim.stream_answer`; Responses events,
:mod:`sim.responses_answer`) run through :func:`relay`; they differ only in the bytes one
token event becomes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from sim.engine import SimEngine
from sim.faults import DIE_AFTER_CHUNKS
from sim.generation import Plan, next_event
from sim.realtime import Handle, TokenEvent


class Writes(Protocol):
    """What a stream writes for each token event; ``finished`` once the last one was written."""

    finished: bool

    def of(self, event: TokenEvent) -> list[bytes]:
        """The pieces one token event becomes (the closing ones with the last)."""
        ...


async def first_event(engine: SimEngine, plan: Plan, handle: Handle,
                      disconnected: Callable[[], asyncio.Future[Any]]) -> TokenEvent | None:
    """Wait for a request's first token (llama-server sends no headers before it).

    None when the client went away first; the request is then aborted.
    """
    gone = disconnected()
    try:
        event = await next_event(handle, gone)
    finally:
        gone.cancel()
    if event is None:
        engine.live.abort(plan.core_rid)
        engine.done(plan.core_rid)
    return event


async def relay(engine: SimEngine, plan: Plan, handle: Handle, disconnected: Callable[[], asyncio.Future[Any]],
                writes: Writes, opening: Sequence[bytes] = (), early: TokenEvent | None = None,
                others: Sequence[Plan] = ()) -> AsyncIterator[bytes]:
    """The body: ``opening``, then what each token event becomes, until the last or the client leaves.

    Events already queued when one arrives go into the same write (a host running behind).
    ``early`` is a first event already taken from the queue (:func:`first_event`). Under the
    ``die_mid_stream`` fault each piece is its own write and the process ends after a few.
    A client that goes away aborts the request. ``others``: the request's other choices
    (their events come on ``handle``'s queue), ended with it.
    """
    die = engine.faults.take_mid_stream_death()
    sent = 0
    gone = disconnected()
    batch = list(opening)
    try:
        while True:
            if die:
                for piece in batch:
                    yield piece
                    sent += 1
                    if sent >= DIE_AFTER_CHUNKS:
                        await asyncio.sleep(0.05)  # let the kernel take the bytes already written
                        os._exit(1)
            elif batch:
                yield b"".join(batch)
            if writes.finished:
                return
            event = early if early is not None else await next_event(handle, gone)
            early = None
            if event is None:
                return
            engine.result_posted()
            batch = writes.of(event)
            while not writes.finished and not handle.events.empty():
                batch += writes.of(handle.events.get_nowait())  # late: what is queued goes in the same write
    finally:
        gone.cancel()
        for each in (plan, *others):
            engine.done(each.core_rid)
            if not writes.finished:
                engine.live.abort(each.core_rid)
