"""Where an answer is written: the client's side of one request, as the conductor sees it.

The API implements :class:`Reply` over its connection; the conductor writes the status, the
headers and the body through it, and learns from it when the client has gone. A relayed
stream writes from the engine connection's own callbacks (no task per chunk), so the reply
also carries flow control: when the client reads slower than the engine writes, it pauses
the engine connection (:class:`Pausable`) until the client's buffer drains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Protocol

from syshaxd.engines import EngineRejected
from syshaxd.errors import ApiError, engine_error_message

Headers = Sequence[tuple[bytes, bytes]]
JSON: Headers = ((b"content-type", b"application/json"),)
EVENT_STREAM: Headers = ((b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"))


class Pausable(Protocol):
    """A source that can stop and resume reading (an engine connection)."""

    def pause_reading(self) -> None:
        """Stop for now."""
        ...

    def resume_reading(self) -> None:
        """Go on."""
        ...


class Reply(Protocol):
    """The client's side of one request."""

    @property
    def gone(self) -> bool:
        """Whether the client disconnected."""
        ...

    @property
    def started(self) -> bool:
        """Whether the status line was written (from then on errors go into the body)."""
        ...

    def start(self, status: int, headers: Headers, length: int | None = None, first: bytes = b"") -> None:
        """Write the status and headers, and ``first`` body bytes with them; ``length`` None means a
        body of unknown length (chunked)."""
        ...

    def write(self, data: bytes) -> None:
        """Write body bytes."""
        ...

    def end(self, last: bytes = b"") -> None:
        """The answer is complete; ``last`` body bytes go with its end."""
        ...

    def abort(self) -> None:
        """Drop the client's connection: an answer cut short must not pass for a whole one."""
        ...

    def when_gone(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once if the client disconnects before :meth:`end`."""
        ...

    def flow(self, source: Pausable | None) -> None:
        """Pause ``source`` while the client's buffer is full (None: nothing to pause)."""
        ...

    async def drain(self) -> None:
        """Return once the client's buffer has room (for writers that run as a task)."""
        ...


def request_id_header(request_id: str) -> tuple[bytes, bytes]:
    """The ``x-request-id`` response header."""
    return (b"x-request-id", request_id.encode("latin-1", "replace"))


#: Printable ASCII stays, every other byte reads "?" (a header value carries no control bytes).
_PRINTABLE = bytes(c if 32 <= c < 127 else 63 for c in range(256))


def story_headers(request_id: str, service_class: str, device: str | None, engine: str, mode: str,
                  reason: str) -> tuple[tuple[bytes, bytes], ...]:
    """Where an answer ran and why, for the client: ``x-request-id`` and the ``x-syshax-class``,
    ``-device``, ``-engine``, ``-mode`` and ``-reason`` headers (the reason in printable ASCII,
    at most 160 characters)."""
    tame = reason[:160].encode("ascii", "replace").translate(_PRINTABLE)
    return (request_id_header(request_id), (b"x-syshax-class", service_class.encode("latin-1", "replace")),
            (b"x-syshax-device", (device or "-").encode()), (b"x-syshax-engine", engine.encode("latin-1", "replace")),
            (b"x-syshax-mode", mode.encode()), (b"x-syshax-reason", tame))


class Told(Protocol):
    """A request whose answer carries its story (a flight)."""

    request_id: str
    story: tuple[tuple[bytes, bytes], ...]


def answer_headers(flight: Told) -> tuple[tuple[bytes, bytes], ...]:
    """The headers every answer of ``flight`` carries: its story once placed, its id always."""
    return flight.story or (request_id_header(flight.request_id),)


def send_whole(reply: Reply, status: int, body: bytes, request_id: str, headers: Headers = JSON,
               story: Headers = ()) -> None:
    """A complete answer of known length (``story``: the request's :func:`answer_headers`)."""
    reply.start(status, (*headers, *(story or (request_id_header(request_id),))), len(body), body)
    reply.end()


def send_rejected(reply: Reply, rejected: EngineRejected, request_id: str) -> None:
    """An engine refused the request itself (4xx): the client gets that answer, nothing is retried.

    The body is the engine's when it is OpenAI's error object already, else reshaped to one.
    """
    try:
        data = json.loads(rejected.body)
        theirs = isinstance(data, dict) and isinstance(data.get("error"), dict)
    except (ValueError, UnicodeDecodeError):
        theirs = False
    if theirs:
        send_whole(reply, rejected.status, rejected.body, request_id)
        return
    kind = "not_found_error" if rejected.status == 404 else "invalid_request_error"
    send_error(reply, ApiError(rejected.status, engine_error_message(rejected.status, rejected.body), type=kind),
               request_id)


def send_error(reply: Reply, error: ApiError, request_id: str | None = None) -> None:
    """An OpenAI error object as the whole answer: the one way an error reaches a client.

    An answer that has begun cannot become an error any more: it is cut (the client's
    connection dropped) so that what was sent never passes for a whole answer. A stream that
    knows it stands between two events ends with the error inside it instead (:func:`end_stream`).
    """
    if reply.started:
        reply.abort()
        return
    body = error.json()
    headers = [*JSON, *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items())]
    if request_id is not None:
        headers.append(request_id_header(request_id))
    reply.start(error.status, headers, len(body), body)
    reply.end()


def end_stream(reply: Reply, error: ApiError) -> None:
    """End an event stream that has begun, between two events, with ``error``: its event, then
    ``[DONE]``, then the stream's clean end."""
    reply.flow(None)
    reply.end(error.event())


def outcome_of(error: ApiError) -> str:
    """How a request that ended with ``error`` is recorded."""
    return "timeout" if error.status == 504 else "rejected" if error.status < 500 else "error"
