"""Bytes in, requests out: one connection's parser, held to the edge limits while it reads.

``httptools`` calls back with the target in pieces and each header whole; the reader counts
them as they come and refuses a target past ``max_target_bytes`` (414), a head past
``max_header_bytes`` or ``max_headers`` (431) at once, before more of it is kept. One long
header is the exception: httptools joins its pieces before it calls back, so the bytes fed
while a head is unfinished are counted too, and a head still unfinished past
``max_header_bytes`` of them is refused (at most one read more is held). A whole head is
checked and becomes an :class:`~syshaxd.api.incoming.Incoming` in :attr:`RequestReader.queue`
(its body may still be arriving); at most :data:`MAX_PIPELINED` wait there, and reading stops
past them. A request that asked to upgrade (``h2c``) stays plain HTTP/1.1: the parser stops
after it, and reading goes on from where it stopped (taking the body the parser skipped). A
request that cannot be read ends the reading, its refusal queued in its turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import httptools

from syshaxd.api.incoming import (
    Incoming,
    Refusal,
    read_head,
    too_large_head,
    too_long_target,
    too_many_headers,
)
from syshaxd.config import EdgeLimits

#: Requests read ahead on one connection; past them, no more is read.
MAX_PIPELINED = 16
Address = tuple[str, int] | None


class _StopReading(Exception):
    """More requests read ahead than :data:`MAX_PIPELINED`."""


class RequestReader:
    """One connection's requests as they are read."""

    __slots__ = ("_body", "_head_fed", "_head_size", "_headers", "_max_head", "_max_headers", "_max_target", "_url",
                 "_url_size", "clock", "ends", "ended", "head_began", "limits", "max_body", "parser", "queue", "refused")

    def __init__(self, limits: EdgeLimits, max_body: int, ends: tuple[Address, Address],
                 clock: Callable[[], float], refused: Callable[[str], None]) -> None:
        self.limits = limits
        self.max_body = max_body
        self.ends = ends  # the client's and the server's address
        self.clock = clock
        self.refused = refused  # counts a refusal by its reason
        self._max_head, self._max_headers, self._max_target = (limits.max_header_bytes, limits.max_headers,
                                                               limits.max_target_bytes)
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Incoming] = deque()  # heads read, oldest first; not yet answered
        self.ended = False  # no more is read
        self.head_began: float | None = None  # loop time of an unfinished head's first byte
        self._url: list[bytes] = []
        self._url_size = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self._head_fed = 0  # bytes fed while the head is unfinished
        self._body: Incoming | None = None  # the request whose body the parser is in

    def feed(self, data: bytes) -> None:
        """Parse what the client sent."""
        if self.head_began is not None:
            self._head_fed += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._go_on(data[upgrade.args[0]:])
        except httptools.HttpParserCallbackError as exc:
            self._stopped(exc.__context__, exc)
        except httptools.HttpParserError as exc:
            if not self.ended:  # else: what followed a "Connection: close" request, not read
                self.refuse(Refusal(400, f"malformed HTTP request: {exc}", "malformed"))
        if self.head_began is not None and self._head_fed > self._max_head and not self.ended:
            self.refuse(too_large_head(self.limits))

    def _go_on(self, rest: bytes) -> None:
        """The parser stopped after a request that asked to upgrade: read on as HTTP/1.1."""
        body = self._body
        if body is not None and body.raw_left:  # the body the parser skipped comes first
            part, rest = rest[:body.raw_left], rest[body.raw_left:]
            body.raw_left -= len(part)
            body.add_body(part, self.max_body)
            if body.raw_left:
                return
            self._complete(body)
        if rest and not self.ended:
            self.feed(rest)

    def refuse(self, refusal: Refusal) -> None:
        """A request cannot be read: its refusal waits in its turn, and no more is read."""
        self.ended = True
        self.refused(refusal.reason)
        self.head_began = None
        incoming, self._body = self._body, None
        if incoming is None or incoming not in self.queue:
            incoming = Incoming(self.clock())
            self.queue.append(incoming)
        incoming.refusal = refusal

    def _stopped(self, cause: BaseException | None, exc: Exception) -> None:
        if isinstance(cause, Refusal):
            self.refuse(cause)
        elif isinstance(cause, _StopReading):
            self.ended = True
            self.head_began = None
            self.refused("pipeline")
        else:
            raise exc

    # -- httptools' callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        if len(self.queue) >= MAX_PIPELINED:
            raise _StopReading
        self.head_began = self.clock()
        self._head_fed = 0
        self._url, self._url_size, self._headers, self._head_size = [], 0, [], 0

    def on_url(self, url: bytes) -> None:
        self._url_size += len(url)
        if self._url_size > self._max_target:
            raise too_long_target(self.limits)
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._head_size + self._url_size > self._max_head:
            raise too_large_head(self.limits)
        if len(self._headers) >= self._max_headers:
            raise too_many_headers(self.limits)
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        began, self.head_began = self.head_began or self.clock(), None
        url = self._url[0] if len(self._url) == 1 else b"".join(self._url)
        self._body = read_head(self.parser, began, url, self._headers, self.max_body, self.ends)
        self.queue.append(self._body)

    def on_body(self, body: bytes) -> None:
        if self._body is not None:
            self._body.add_body(body, self.max_body)

    def on_message_complete(self) -> None:
        incoming = self._body
        if incoming is None:
            return
        if incoming.has_body and self.parser.should_upgrade():
            request = incoming.request
            length = request.header(b"content-length") if request is not None else None
            if length is None:
                raise Refusal(400, "a request asking for a protocol upgrade may not have a chunked body", "malformed")
            incoming.raw_left = int(length)  # the parser skips the body of such a request
            return
        self._complete(incoming)

    def _complete(self, incoming: Incoming) -> None:
        incoming.finish()
        self._body = None
        if incoming.request is not None and not incoming.request.keep_alive:
            self.ended = True  # nothing after a "Connection: close" request is read
