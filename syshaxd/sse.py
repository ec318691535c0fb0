"""Server-Sent Events, read: the one reader every part of syshax uses.

Engines stream answers as ``text/event-stream``, the control API streams its events the same
way, and the load generator, the startup check, the console and the tests read them. All of
them read with :class:`Decoder`: feed it bytes as they arrive, get whole events back.

It works on bytes (a console reads a state event of tens of kilobytes several times a
second; decoding and re-splitting text would cost it more than drawing) and follows the
parts of the WHATWG event-stream format that peers use: lines end in LF, CRLF or CR; a blank
line ends an event; ``data:`` lines of one event are joined with LF; one space after the colon
is dropped; ``event:`` names the event, ``id:`` sets its id; a line starting with ``:`` is a
comment (a keep-alive). An event without a ``data`` line is not dispatched, and an event cut
off by the end of the stream is dropped, as a browser does.

``strict`` readers (the conductor reading an engine) also refuse a line that is no field of
the format at all: an engine that answers garbage with status 200 is a failure to report,
not a stream of nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

__all__ = ["DONE", "Decoder", "Event", "NotEventStream", "aiter_events"]

#: The data of OpenAI's last event. Never proof of success by itself: an error event precedes it.
DONE = b"[DONE]"
_FIELDS = (b"data", b"event", b"id", b"retry")


class NotEventStream(ValueError):
    """A strict reader met a line that is not part of an event stream."""


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event: its name, its data (bytes, lines joined with LF) and its id."""

    data: bytes
    event: str = "message"
    id: str | None = None

    @property
    def done(self) -> bool:
        """Whether this is OpenAI's ``data: [DONE]``."""
        return self.data == DONE

    def json(self) -> Any:
        """The data parsed as JSON (``ValueError`` when it is not)."""
        return json.loads(self.data)


class Decoder:
    """An incremental event-stream reader: ``feed`` bytes, get the events they complete."""

    __slots__ = ("_buffer", "_data", "_event", "_id", "_last_id", "_pending_cr", "strict")

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._buffer = b""
        self._pending_cr = False  # the previous chunk ended in CR: a LF starting this one belongs to it
        self._data: list[bytes] = []
        self._event: bytes | None = None
        self._id: bytes | None = None
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        """Take the next bytes of the stream; returns the events they complete, in order.

        Raises:
            NotEventStream: a strict reader met a line that is no event-stream field.
        """
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = chunk.endswith(b"\r")
        data = self._buffer + chunk if self._buffer else chunk
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, self._buffer = data.split(b"\n")
        out: list[Event] = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                out.append(event)
        if self.strict and self._buffer:
            self._check_partial(self._buffer)
        return out

    @staticmethod
    def _check_partial(line: bytes) -> None:
        # A strict reader refuses garbage as soon as it can tell, not only at its line's end:
        # an engine that answers a bare error text with 200 and never a newline must fail.
        if line[0] == 58:  # a comment
            return
        field, colon, _ = line.partition(b":")
        if colon:
            ok = field in _FIELDS
        else:
            ok = any(name.startswith(field) for name in _FIELDS)
        if not ok:
            raise NotEventStream(f"not an event stream: {line[:80]!r}")

    @property
    def pending(self) -> bool:
        """Whether an event has begun and not ended (the stream stopped inside an event)."""
        return bool(self._buffer or self._data or self._event is not None)

    def _line(self, line: bytes) -> Event | None:
        if not line:
            return self._dispatch()
        if line[0] == 58:  # b":": a comment
            return None
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._event = value
        elif field == b"id":
            if b"\0" not in value:
                self._id = value
        elif self.strict and field not in _FIELDS:
            raise NotEventStream(f"not an event stream: {line[:80]!r}")
        return None

    def _dispatch(self) -> Event | None:
        data, name, ident = self._data, self._event, self._id
        self._data, self._event, self._id = [], None, None
        if ident is not None:
            self._last_id = ident.decode("utf-8", "replace")
        if not data:
            return None
        return Event(data[0] if len(data) == 1 else b"\n".join(data),
                     name.decode("utf-8", "replace") if name else "message", self._last_id)


async def aiter_events(chunks: AsyncIterable[bytes], *, strict: bool = False) -> AsyncIterator[Event]:
    """The events of a byte stream (an httpx ``aiter_bytes()``/``aiter_raw()``, a socket reader)."""
    decoder = Decoder(strict=strict)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
