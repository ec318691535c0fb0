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
from syshaxd.errors import ApiError, engine_error_message, error_body, sse_error

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

    def start(self, status: int, headers: Headers, length: int | None = None) -> None:
        """Write the status and headers; ``length`` None means a body of unknown length (chunked)."""
        ...

    def write(self, data: bytes) -> None:
        """Write body bytes."""
        ...

    def end(self) -> None:
        """The answer is complete."""
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


def send_whole(reply: Reply, status: int, body: bytes, request_id: str, headers: Headers = JSON) -> None:
    """A complete answer of known length."""
    reply.start(status, (*headers, request_id_header(request_id)), len(body))
    reply.write(body)
    reply.end()


def send_rejected(reply: Reply, rejected: EngineRejected, request_id: str) -> None:
    """An engine refused the request itself (4xx): the client gets that answer, nothing is retried.

    The body is the engine's, reshaped to OpenAI's error object when it is not one already.
    """
    body = rejected.body
    try:
        data = json.loads(rejected.body)
        reshape = not (isinstance(data, dict) and isinstance(data.get("error"), dict))
    except (ValueError, UnicodeDecodeError):
        reshape = True
    if reshape:
        message = engine_error_message(rejected.status, rejected.body)
        kind = "not_found_error" if rejected.status == 404 else "invalid_request_error"
        body = json.dumps(error_body(message, type=kind, code=str(rejected.status))).encode()
    send_whole(reply, rejected.status, body, request_id)


def send_error(reply: Reply, error: ApiError, request_id: str | None = None) -> None:
    """An OpenAI error object as the whole answer; once an answer has begun, just its end."""
    if reply.started:
        reply.end()
        return
    body = json.dumps(error.body(), ensure_ascii=False, separators=(",", ":")).encode()
    headers = [*JSON, *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items())]
    if request_id is not None:
        headers.append(request_id_header(request_id))
    reply.start(error.status, headers, len(body))
    reply.write(body)
    reply.end()


def end_stream(reply: Reply, error: ApiError) -> None:
    """End an event stream that has begun with ``error`` as an event, then ``[DONE]``."""
    if not reply.gone:
        reply.write(sse_error(error.message, type=error.type, code=error.code or str(error.status)))
    reply.flow(None)
    reply.end()


def outcome_of(error: ApiError) -> str:
    """How a request that ended with ``error`` is recorded."""
    return "timeout" if error.status == 504 else "rejected" if error.status < 500 else "error"
