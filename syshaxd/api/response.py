"""One response on an API connection: HTTP/1.1 framing, flow control, and the client leaving.

:class:`Response` is the conductor's :class:`~syshaxd.conductor.Reply` over a connection:
the status line and headers, then the body with a length or chunked, and the end, after which
the connection takes its next request. While the client's socket buffer is full, the source
feeding the body (an engine connection) is paused; writers that run as a task await
:meth:`Response.drain`.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Protocol

from syshaxd.conductor import Headers, Pausable

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


class Carrier(Protocol):
    """What a response needs of its connection."""

    def write(self, data: bytes) -> None:
        """Write bytes to the client."""
        ...

    def response_done(self, response: Response) -> None:
        """The response ended: take the next request, or close."""
        ...

    @property
    def writable(self) -> bool:
        """Whether the client's buffer has room."""
        ...

    async def wait_writable(self) -> None:
        """Return once the client's buffer has room (or the client is gone)."""
        ...

    def abort(self) -> None:
        """Drop the connection now."""
        ...


class Response:
    """The answer to one request."""

    __slots__ = ("_chunked", "_gone_callbacks", "_source", "carrier", "ended", "gone", "head_only", "keep_alive",
                 "started", "status", "version")

    def __init__(self, carrier: Carrier, *, keep_alive: bool, head_only: bool = False, version: bytes = b"1.1") -> None:
        self.carrier = carrier
        self.keep_alive = keep_alive
        self.head_only = head_only
        self.version = version
        self.started = False
        self.ended = False
        self.gone = False
        self.status = 0
        self._chunked = False
        self._gone_callbacks: list[Callable[[], None]] = []
        self._source: Pausable | None = None

    # -- the Reply protocol ------------------------------------------------------------

    def start(self, status: int, headers: Headers, length: int | None = None, first: bytes = b"") -> None:
        """Write the status line and headers, and ``first`` body bytes with them (one write)."""
        if self.started or self.gone:
            return
        self.started = True
        self.status = status
        lines = [b"HTTP/%s %d %s\r\n" % (self.version, status, _REASONS.get(status, b"Unknown"))]
        lines.extend(b"%s: %s\r\n" % (name, value) for name, value in headers
                     if name not in (b"content-length", b"transfer-encoding", b"connection"))
        if length is not None:
            lines.append(b"content-length: %d\r\n" % length)
        elif self.version == b"1.1" and status not in (204, 304) and status >= 200:
            self._chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        else:
            self.keep_alive = False  # an HTTP/1.0 client learns the end from the close
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        lines.append(self._framed(first))
        self.carrier.write(b"".join(lines))

    def write(self, data: bytes) -> None:
        """Write body bytes (framed as a chunk when the length is unknown)."""
        if not data or self.gone or self.ended or self.head_only:
            return
        self.carrier.write(self._framed(data))
        if self._source is not None and not self.carrier.writable:
            self._source.pause_reading()

    def end(self, last: bytes = b"") -> None:
        """The response is complete; ``last`` body bytes go with its end (one write)."""
        if self.ended:
            return
        self.ended = True
        self._source = None
        if not self.gone:
            tail = self._framed(last) + (b"0\r\n\r\n" if self._chunked and not self.head_only else b"")
            if tail:
                self.carrier.write(tail)
            self.carrier.response_done(self)

    def _framed(self, data: bytes) -> bytes:
        # Each write is one syscall (and one packet): the head, the first and the last bytes
        # of an answer go with their neighbours.
        if not data or self.head_only:
            return b""
        return b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data

    def when_gone(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once if the client disconnects before the end."""
        if self.gone:
            callback()
        elif not self.ended:
            self._gone_callbacks.append(callback)

    def flow(self, source: Pausable | None) -> None:
        """Pause ``source`` while the client's buffer is full."""
        self._source = source
        if source is not None and not self.carrier.writable:
            source.pause_reading()

    async def drain(self) -> None:
        """Return once the client's buffer has room."""
        if not self.carrier.writable and not self.gone:
            await self.carrier.wait_writable()

    def abort(self) -> None:
        """Drop the client's connection: a body cut short must not pass for a whole one."""
        self._source = None
        self.lost()
        self.carrier.abort()

    # -- the connection's side -------------------------------------------------------

    def resume(self) -> None:
        """The client's buffer drained: the source may go on."""
        if self._source is not None:
            self._source.resume_reading()

    def lost(self) -> None:
        """The client disconnected."""
        if self.gone:
            return
        self.gone = True
        callbacks, self._gone_callbacks = self._gone_callbacks, []
        if not self.ended:
            for callback in callbacks:
                callback()


def status_only(carrier: Carrier, status: int, body: bytes, *, version: bytes = b"1.1",
                headers: Headers = ((b"content-type", b"application/json"),)) -> None:
    """A short complete answer that closes the connection (a request that could not be read)."""
    response = Response(carrier, keep_alive=False, version=version)
    response.start(status, headers, len(body))
    response.write(body)
    response.end()
