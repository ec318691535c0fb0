"""Bytes in, requests out: one connection's parser, held to the edge limits while it reads.

``httptools``' callbacks fill an :class:`~syshaxd.api.incoming.Incoming` per request, which
counts the target and each header as they come. One long header is the exception: httptools
joins its pieces before it calls back, so the bytes fed while a head is unfinished are
counted too, and a head still unfinished past ``max_header_bytes`` of them is refused (at
most one read more is held). A request whose head is whole joins :attr:`RequestReader.queue`
(its body may still be arriving); at most :data:`MAX_PIPELINED` wait there, and reading
stops past them. A request that asked to upgrade (``h2c``) stays plain HTTP/1.1: the parser
stops after it, and reading goes on from where it stopped (taking the body the parser
skipped). A request that cannot be read ends the reading, its refusal queued in its turn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import cast

import httptools

from syshaxd.api.asgi import Request
from syshaxd.api.incoming import Incoming, Refusal, too_large_head
from syshaxd.config import EdgeLimits

#: Requests read ahead on one connection; past them, no more is read.
MAX_PIPELINED = 16
Address = tuple[str, int] | None


class _StopReading(Exception):
    """More requests read ahead than :data:`MAX_PIPELINED`."""


class RequestReader:
    """One connection's requests as they are read."""

    def __init__(self, limits: EdgeLimits, max_body: int, ends: tuple[Address, Address],
                 clock: Callable[[], float], refused: Callable[[str], None]) -> None:
        self.limits = limits
        self.max_body = max_body
        self.peer, self.local = ends
        self.clock = clock
        self.refused = refused  # counts a refusal by its reason
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Incoming] = deque()  # heads read, oldest first; not yet answered
        self.incoming: Incoming | None = None  # the request the parser is in
        self.ended = False  # no more is read
        self._head_fed = 0  # bytes fed while the request's head is unfinished

    def feed(self, data: bytes) -> None:
        """Parse what the client sent."""
        incoming = self.incoming
        if incoming is not None and incoming.request is None:
            self._head_fed += len(data)
        while data and not self.ended:
            incoming = self.incoming
            if incoming is not None and incoming.raw_left:
                data = self._raw_body(incoming, data)
                continue
            try:
                self.parser.feed_data(data)
                data = b""
            except httptools.HttpParserUpgrade as upgrade:
                data = data[upgrade.args[0]:]  # the parser stopped after a request that asked to upgrade
            except httptools.HttpParserCallbackError as exc:
                self._stopped(exc.__context__, exc)
                data = b""
            except httptools.HttpParserError as exc:
                if not self.ended:  # else: what followed a "Connection: close" request, not read
                    self.refuse(Refusal(400, f"malformed HTTP request: {exc}", "malformed"))
                data = b""
        incoming = self.incoming
        if not self.ended and incoming is not None and incoming.request is None \
                and self._head_fed > self.limits.max_header_bytes:
            self.refuse(too_large_head(self.limits))

    def refuse(self, refusal: Refusal) -> None:
        """A request cannot be read: its refusal waits in its turn, and no more is read."""
        self.ended = True
        self.refused(refusal.reason)
        incoming, self.incoming = self.incoming, None
        if incoming is None or incoming not in self.queue:
            incoming = Incoming(self.clock())
            self.queue.append(incoming)
        incoming.refusal = refusal

    def _raw_body(self, incoming: Incoming, data: bytes) -> bytes:
        """Take body bytes the parser skipped; returns what follows them."""
        part, rest = data[:incoming.raw_left], data[incoming.raw_left:]
        incoming.raw_left -= len(part)
        incoming.add_body(part, self.max_body)
        if not incoming.raw_left:
            self._complete(incoming)
        return rest

    def _stopped(self, cause: BaseException | None, exc: Exception) -> None:
        if isinstance(cause, Refusal):
            self.refuse(cause)
        elif isinstance(cause, _StopReading):
            self.ended = True
            self.incoming = None
            self.refused("pipeline")
        else:
            raise exc

    # -- httptools' callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        if len(self.queue) >= MAX_PIPELINED:
            raise _StopReading
        self.incoming = Incoming(self.clock())
        self._head_fed = 0

    def on_url(self, url: bytes) -> None:
        cast(Incoming, self.incoming).add_url(url, self.limits)

    def on_header(self, name: bytes, value: bytes) -> None:
        cast(Incoming, self.incoming).add_header(name, value, self.limits)

    def on_headers_complete(self) -> None:
        incoming = cast(Incoming, self.incoming)
        incoming.finish_head(self.parser, self.max_body, self.peer, self.local)
        self.queue.append(incoming)

    def on_body(self, body: bytes) -> None:
        cast(Incoming, self.incoming).add_body(body, self.max_body)

    def on_message_complete(self) -> None:
        incoming = cast(Incoming, self.incoming)
        if self.parser.should_upgrade() and incoming.has_body:
            length = cast(Request, incoming.request).header(b"content-length")
            if length is None:
                raise Refusal(400, "a request asking for a protocol upgrade may not have a chunked body", "malformed")
            incoming.raw_left = int(length)  # the parser skips the body of such a request
            return
        self._complete(incoming)

    def _complete(self, incoming: Incoming) -> None:
        incoming.finish()
        self.incoming = None
        if incoming.request is not None and not incoming.request.keep_alive:
            self.ended = True  # nothing after a "Connection: close" request is read
