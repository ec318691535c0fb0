"""Keep-alive HTTP/1.1 connections to one engine: an asyncio protocol over ``httptools``' C parser.

Every token an engine streams is one chunk, and each passes through here, so this is the
cheapest path Python offers: no client library, no task per response. A response is handed
to a :class:`Sink` by callbacks, straight from the event loop's read: the relay writes it on
to the client in the same callback. The body of one read is given to the sink in one piece
(the chunks the engine sent together), so several chunks already waiting cost one write.
Interim answers (1xx) are read past; the answer to a HEAD request ends with its headers.

The pool keeps idle connections in a stack: a request takes the most recently used one whose
keep-alive has not expired and which the engine has not closed, else opens a new one (with
``TCP_NODELAY``: a small write must not wait for the engine's delayed ACK). A response that
ends cleanly puts its connection back; anything else closes it, which is how an engine
learns that a request was abandoned.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

import httptools

#: Seconds an idle connection is kept. Below uvicorn's 5 s (vLLM's server) so that the engine
#: never closes a connection just as a request is sent on it.
KEEPALIVE_EXPIRY = 4.0
CONNECT_TIMEOUT = 5.0


class ConnectionLost(ConnectionError):
    """The engine closed or reset the connection before the response was complete."""


class PoolClosed(ConnectionError):
    """The pool is closed (the daemon is stopping): no new request goes out."""


class Sink(Protocol):
    """Where one response goes, as the connection reads it."""

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The status line and headers arrived."""
        ...

    def on_body(self, data: bytes) -> None:
        """More of the body (the de-chunked bytes of one read)."""
        ...

    def on_end(self, last: bytes = b"") -> None:
        """The response is complete (the connection may already carry the next request);
        ``last``: the body's last bytes, when they came in the read that ended it."""
        ...

    def on_lost(self, exc: BaseException) -> None:
        """The connection broke before the response was complete."""
        ...


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once (no Nagle): an SSE chunk must not wait for an ACK."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class EngineConnection(asyncio.Protocol):
    """One HTTP/1.1 connection to an engine, carrying one request at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.sink: Sink | None = None
        self.reused = False  # carried a request before the current one
        self.answered = False  # the current response has begun
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._keep = True
        self._done = False
        self._interim = False  # reading a 1xx answer, which the final one follows
        self._no_body = False  # the request was HEAD: the answer has no body, whatever it declares
        self._stale_parser = False  # the parser still expects a body that will never come

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(ConnectionLost("the engine switched protocols (101), which syshaxd never asks for"))
            return
        except httptools.HttpParserError as exc:
            if self._parser.get_status_code() == 101:  # llhttp pauses on a 101 without Upgrade too
                self._fail(ConnectionLost("the engine switched protocols (101), which syshaxd never asks for"))
            else:
                self._fail(ConnectionLost(f"the engine's answer is not HTTP: {exc}"))
            return
        last = b""
        if self._body:
            body, self._body = self._body, []
            data = body[0] if len(body) == 1 else b"".join(body)
            if self._done:
                last = data  # the end came with it: one call, so the relay can write both at once
            elif self.sink is not None:
                self.sink.on_body(data)
        if self._done:
            self._finish(last)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.pool.forget(self)
        if self.sink is not None and not self._done:
            self._fail(ConnectionLost(f"connection closed by the engine{f': {exc}' if exc else ''}"))

    def pause_writing(self) -> None:
        pass  # requests are small; the body is written at once

    # -- httptools callbacks ---------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        headers, self._headers = self._headers, []
        status = self._parser.get_status_code()
        if status < 200:
            # 100 Continue, 103 Early Hints: the answer is still to come (llhttp reads past their
            # end). A 101 is no answer at all: the parser stops on it and the connection fails.
            self._interim = True
            return
        self.answered = True
        self._keep = self._parser.should_keep_alive()
        if self._no_body:
            # llhttp cannot be told the request was HEAD: it would wait for the body the headers
            # declare. The answer is over; the parser is replaced before the next request.
            self._done = self._stale_parser = True
        if self.sink is not None:
            self.sink.on_head(status, headers)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._done = True

    # -- requests --------------------------------------------------------------------

    def send(self, request: bytes, sink: Sink, no_body: bool = False) -> None:
        """Write one whole request; the response goes to ``sink``. ``no_body``: the request was
        HEAD, so the answer ends with its headers."""
        assert self.transport is not None and self.sink is None
        self.sink = sink
        self.answered = self._done = False
        self._no_body = no_body
        self.transport.write(request)

    def abort(self) -> None:
        """Drop the connection now (the engine stops the request it was answering)."""
        self.sink = None
        if self.transport is not None:
            self.transport.abort()

    def pause_reading(self) -> None:
        """Stop reading the engine (the client reads slower than the engine writes)."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read the engine again."""
        if self.transport is not None:
            self.transport.resume_reading()

    def _finish(self, last: bytes = b"") -> None:
        sink, self.sink = self.sink, None
        self.reused = True
        if self._stale_parser:
            self._stale_parser = False
            self._parser = httptools.HttpResponseParser(self)
        if self._keep and self.transport is not None and not self.transport.is_closing():
            self.pool.release(self)
        elif self.transport is not None:
            self.transport.close()
        if sink is not None:
            sink.on_end(last)

    def _fail(self, exc: BaseException) -> None:
        sink, self.sink = self.sink, None
        if self.transport is not None:
            self.transport.abort()
        if sink is not None:
            sink.on_lost(exc)


class ConnectionPool:
    """Idle keep-alive connections to one engine, newest first, at a constant cost per request."""

    def __init__(self, host: str, port: int, *, unix_path: str | None = None, max_idle: int = 512,
                 keepalive_expiry: float = KEEPALIVE_EXPIRY, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.port = port
        self.unix_path = unix_path  # a Unix socket instead of host:port (a worker's way to the daemon)
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._clock = clock
        self._idle: deque[EngineConnection] = deque()  # oldest left, newest right
        self._open: set[EngineConnection] = set()
        self._tasks: set[asyncio.Task[Any]] = set()  # kept until they end (the loop holds only weak references)
        self.closed = False
        self.opened = 0  # connections opened, ever: how well keep-alive works (tests read it)

    @property
    def idle(self) -> int:
        """Idle connections kept open."""
        return len(self._idle)

    @property
    def busy(self) -> int:
        """Connections carrying a request or a response."""
        return len(self._open) - len(self._idle)

    def take_idle(self) -> EngineConnection | None:
        """The newest usable idle connection, if any (no waiting)."""
        if self.closed:
            return None
        now = self._clock()
        while self._idle and now - self._idle[0].idle_since > self.keepalive_expiry:
            self._idle.popleft().abort()  # outlived its keep-alive (or will, before it is used)
        while self._idle:
            conn = self._idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                return conn
            conn.abort()
        return None

    async def acquire(self) -> EngineConnection:
        """The newest usable idle connection, or a new one.

        Raises:
            OSError: the engine cannot be reached (refused, unreachable, timed out).
        """
        if self.closed:
            raise PoolClosed("the engine's connection pool is closed (syshaxd is stopping)")
        idle = self.take_idle()
        if idle is not None:
            return idle
        loop = asyncio.get_running_loop()
        if self.unix_path is not None:
            connecting = loop.create_unix_connection(lambda: EngineConnection(self), self.unix_path)
        else:
            connecting = loop.create_connection(lambda: EngineConnection(self), self.host, self.port)
        try:
            _, conn = await asyncio.wait_for(connecting, CONNECT_TIMEOUT)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no connection within {CONNECT_TIMEOUT:g} s") from None
        if self.closed:  # closed while connecting: nobody would close this one
            conn.abort()
            raise PoolClosed("the engine's connection pool is closed (syshaxd is stopping)")
        self.opened += 1
        self._open.add(conn)
        return conn

    def release(self, conn: EngineConnection) -> None:
        """A response ended cleanly: keep its connection for the next request."""
        if self.closed or len(self._idle) >= self.max_idle:
            conn.abort()
            return
        conn.idle_since = self._clock()
        self._idle.append(conn)

    def forget(self, conn: EngineConnection) -> None:
        """A connection closed (either side): it is neither idle nor open any more."""
        self._open.discard(conn)
        try:
            self._idle.remove(conn)
        except ValueError:
            pass

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a task of this pool, kept until it ends; cancelled by :meth:`close`."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Close every connection, busy ones too: their sinks see the connection lost; and
        cancel the pool's own tasks (a request being sent again)."""
        self.closed = True
        for task in [*self._tasks]:
            task.cancel()
        for conn in [*self._open]:
            if conn.transport is not None:
                conn.transport.abort()  # the sink stays: connection_lost tells it
        self._idle.clear()
