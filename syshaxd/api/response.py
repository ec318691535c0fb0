"""One response on an API connection: HTTP/1.1 framing, flow control, and the client leaving.

:class:`Response` is the conductor's :class:`~syshaxd.conductor.Reply` over a connection:
the status line (always ``HTTP/1.1``, whatever version the client spoke) and headers (only
well-formed, end-to-end ones: :mod:`syshaxd.api.headers`), then the body with a length or
chunked (to an HTTP/1.0 client: delimited by the close), and the end, after which the
connection takes its next request. A 1xx status is an interim answer, the final one still to
come; 204, 304 and the answer to HEAD carry no body. An answer that ends before it began
drops the connection: the client must not wait for it, nor take the next answer for it.
While the client's socket buffer is full, the source feeding the body (an engine connection)
is paused; writers that run as a task await :meth:`Response.drain`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from typing import Protocol

from syshaxd.api.headers import header_lines
from syshaxd.conductor import Headers, Pausable

log = logging.getLogger("syshaxd.api")
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
#: Statuses whose answers never have a body (RFC 9110 6.4.1), whatever their headers say.
_BODILESS = frozenset({204, 304})


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

    __slots__ = ("_chunked", "_gone_callbacks", "_source", "carrier", "ended", "gone", "head_only", "http10",
                 "keep_alive", "no_body", "started", "status")

    def __init__(self, carrier: Carrier, *, keep_alive: bool, head_only: bool = False, http10: bool = False) -> None:
        self.carrier = carrier
        self.keep_alive = keep_alive
        self.head_only = head_only
        self.http10 = http10  # the client spoke HTTP/1.0: no chunks, no 1xx
        self.no_body = head_only  # nothing follows the head (HEAD, 204, 304)
        self.started = False
        self.ended = False
        self.gone = False
        self.status = 0
        self._chunked = False
        self._gone_callbacks: list[Callable[[], None]] = []
        self._source: Pausable | None = None

    # -- the Reply protocol ------------------------------------------------------------

    def start(self, status: int, headers: Headers, length: int | None = None, first: bytes = b"") -> None:
        """Write the status line and headers, and ``first`` body bytes with them (one write);
        1xx: an interim answer, the final one still to come."""
        if self.started or self.gone:
            return
        if status < 200:
            self._interim(status, headers)
            return
        self.started = True
        self.status = status
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")), *header_lines(headers)]
        if status in _BODILESS:
            self.no_body = True
            if length is not None and status == 304:  # the length a GET's answer would have
                lines.append(b"content-length: %d\r\n" % length)
        elif length is not None:
            lines.append(b"content-length: %d\r\n" % length)
        elif self.head_only:
            pass  # no body follows, and how long a GET's would be is not known
        elif not self.http10:
            self._chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        else:
            self.keep_alive = False  # an HTTP/1.0 client learns the end from the close
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        elif self.http10:
            lines.append(b"connection: keep-alive\r\n")
        lines.append(b"\r\n")
        lines.append(self._framed(first))
        self.carrier.write(b"".join(lines))

    def _interim(self, status: int, headers: Headers) -> None:
        # 101 would switch protocols, which this server never does; HTTP/1.0 knows no 1xx.
        if status == 101 or self.http10:
            return
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown")), *header_lines(headers), b"\r\n"]
        self.carrier.write(b"".join(head))

    def write(self, data: bytes) -> None:
        """Write body bytes (framed as a chunk when the length is unknown)."""
        if not data or self.gone or self.ended or self.no_body:
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
        if self.gone:
            return
        if not self.started:
            log.warning("an answer ended before it began: dropping the connection")
            self.gone = True
            self.carrier.abort()
            return
        tail = self._framed(last) + (b"0\r\n\r\n" if self._chunked else b"")
        if tail:
            self.carrier.write(tail)
        self.carrier.response_done(self)

    def _framed(self, data: bytes) -> bytes:
        # Each write is one syscall (and one packet): the head, the first and the last bytes
        # of an answer go with their neighbours.
        if not data or self.no_body:
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


def status_only(carrier: Carrier, status: int, body: bytes,
                headers: Headers = ((b"content-type", b"application/json"),)) -> None:
    """A short complete answer that closes the connection (a request that could not be read)."""
    response = Response(carrier, keep_alive=False)
    response.start(status, headers, len(body), body)
    response.end()
