"""An in-process event bus: the daemon publishes, each control-API stream reads its own queue.

The publisher never waits. Every subscriber has a bounded queue; when a slow reader lets it
fill up, the oldest event is dropped (the console would rather see the newest state) and
the drop is counted for that subscriber and in total. The next event that subscriber reads
is preceded by a ``dropped`` event saying how many it missed.

All methods must be called from the event loop's thread (asyncio queues are not thread-safe).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

#: Default queue length per subscriber: a few seconds of state events plus a burst of decisions.
DEFAULT_MAXSIZE = 256


@dataclass(frozen=True)
class Event:
    """One published event: its name, a sequence number and its JSON text."""

    name: str
    seq: int
    data: str

    def sse(self) -> str:
        """The event as a Server-Sent Events frame."""
        return f"event: {self.name}\nid: {self.seq}\ndata: {self.data}\n\n"


_CLOSED = Event("", -1, "")


class Subscription:
    """One reader's bounded queue of events; iterate it with ``async for``."""

    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=maxsize)
        self._unreported = 0
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> bool:
        """Queue an event, dropping the oldest when full. Returns False if one was dropped."""
        if self.closed:
            return True
        dropped = False
        if self._queue.full():
            self._queue.get_nowait()
            self.dropped += 1
            self._unreported += 1
            dropped = True
        self._queue.put_nowait(event)
        return not dropped

    def _end(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(_CLOSED)

    def close(self) -> None:
        """Stop receiving events and leave the bus."""
        self._end()
        self._bus._discard(self)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if self._unreported:
            count, self._unreported = self._unreported, 0
            return Event("dropped", self._bus.seq, json.dumps({"count": count, "total": self.dropped}))
        event = await self._queue.get()
        if event is _CLOSED:
            raise StopAsyncIteration
        return event


class EventBus:
    """Fan-out of named events to any number of bounded subscriptions."""

    def __init__(self) -> None:
        self._subs: list[Subscription] = []
        self._listened = asyncio.Event()  # set while anyone is subscribed
        self.seq = 0
        self.dropped_total = 0
        self.closed = False

    @property
    def subscriber_count(self) -> int:
        """How many readers are subscribed right now."""
        return len(self._subs)

    async def listened(self) -> None:
        """Return once someone is subscribed (at once if someone is)."""
        await self._listened.wait()

    def publish(self, event: str, data: BaseModel | dict[str, Any]) -> None:
        """Send ``event`` to every subscriber without waiting; full queues drop their oldest."""
        if self.closed:
            return
        self.seq += 1
        if not self._subs:
            return
        text = data.model_dump_json() if isinstance(data, BaseModel) else json.dumps(data)
        item = Event(event, self.seq, text)
        for sub in self._subs:
            if not sub._offer(item):
                self.dropped_total += 1

    def subscribe(self, maxsize: int = DEFAULT_MAXSIZE) -> Subscription:
        """A new subscription; an already closed bus gives one that ends at once."""
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        sub = Subscription(self, maxsize)
        if self.closed:
            sub._end()
        else:
            self._subs.append(sub)
            self._listened.set()
        return sub

    def close(self) -> None:
        """End every subscription (shutdown): their ``async for`` loops finish."""
        self.closed = True
        self._listened.set()  # whoever waits for a listener must see the end
        subs, self._subs = self._subs, []
        for sub in subs:
            sub._end()

    def _discard(self, sub: Subscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)
        if not self._subs:
            self._listened.clear()
