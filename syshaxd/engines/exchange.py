"""One request and its answer on an engine connection: the sink's handle, and an awaitable answer.

:class:`Exchange` is what a relay holds to stop or pause the engine; :class:`EngineResponse` is
an answer read by awaiting (splits, assembled answers, small JSON calls); :func:`engine_events`
reads an engine's event stream from one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from syshaxd.engines.connection import ConnectionPool, EngineConnection, Sink
from syshaxd.engines.failures import EngineFailure, describe_error
from syshaxd.errors import engine_error_message
from syshaxd.sse import Decoder, NotEventStream

#: Chunks an awaited response holds before it stops reading the engine (a slow consumer).
HIGH_WATER = 64


class Exchange:
    """One request and its answer on a connection of the pool; the sink's handle to stop it.

    A request sent on a reused connection that the engine closed before answering (it timed
    the connection out as the request left) goes again, once, on a new connection. ``no_body``:
    the request is HEAD, so its answer ends with the headers.
    """

    def __init__(self, pool: ConnectionPool, request: bytes, sink: Sink, no_body: bool = False) -> None:
        self.pool = pool
        self.request = request
        self.sink = sink
        self.no_body = no_body
        self.conn: EngineConnection | None = None
        self.aborted = False
        self._retried = False

    def start(self, conn: EngineConnection) -> None:
        """Send the request on ``conn``."""
        self.conn = conn
        conn.send(self.request, self, self.no_body)

    def abort(self) -> None:
        """Drop the connection (the engine stops the request); no more callbacks come."""
        self.aborted = True
        if self.conn is not None:
            self.conn.abort()

    def pause_reading(self) -> None:
        """Stop reading the engine for now."""
        if self.conn is not None:
            self.conn.pause_reading()

    def resume_reading(self) -> None:
        """Read the engine again."""
        if self.conn is not None:
            self.conn.resume_reading()

    # -- Sink: passed on, with the one retry ---------------------------------------

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.sink.on_head(status, headers)

    def on_body(self, data: bytes) -> None:
        self.sink.on_body(data)

    def on_end(self, last: bytes = b"") -> None:
        self.sink.on_end(last)

    def on_lost(self, exc: BaseException) -> None:
        conn = self.conn
        if self.aborted or self._retried or conn is None or not conn.reused or conn.answered:
            self.sink.on_lost(exc)
            return
        self._retried = True
        self.pool.spawn(self._again(exc))

    async def _again(self, first: BaseException) -> None:
        try:
            conn = await self.pool.acquire()
        except OSError:
            self.sink.on_lost(first)
            return
        except asyncio.CancelledError:  # the pool closed: the sink must still hear of it
            self.sink.on_lost(first)
            raise
        if self.aborted:
            self.pool.release(conn)
            return
        self.start(conn)


class EngineResponse:
    """An engine's answer read by awaiting: the status, then the body as it arrives."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.exchange: Exchange | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._chunks: deque[bytes] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._head: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._ended = False
        self._error: BaseException | None = None
        self._paused = False

    # -- Sink ------------------------------------------------------------------------

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.headers = status, headers
        if not self._head.done():
            self._head.set_result(status)

    def on_body(self, data: bytes) -> None:
        self._chunks.append(data)
        if len(self._chunks) >= HIGH_WATER and self.exchange is not None and not self._paused:
            self._paused = True
            self.exchange.pause_reading()
        self._wake()

    def on_end(self, last: bytes = b"") -> None:
        if last:
            self._chunks.append(last)
        self._ended = True
        self._wake()

    def on_lost(self, exc: BaseException) -> None:
        self._error = exc
        if not self._head.done():
            self._head.set_exception(EngineFailure(self.engine, describe_error(exc)))
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- reading ---------------------------------------------------------------------

    async def head(self) -> int:
        """The status, once the headers arrived."""
        return await self._head

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as read.

        Raises:
            EngineFailure: the connection broke before the body was complete.
        """
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                if self._paused and len(self._chunks) < HIGH_WATER // 2 and self.exchange is not None:
                    self._paused = False
                    self.exchange.resume_reading()
                yield chunk
            if self._ended:
                return
            if self._error is not None:
                raise EngineFailure(self.engine, describe_error(self._error))
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def aread(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    def close(self) -> None:
        """Stop reading: an answer not yet complete is abandoned (the engine stops it)."""
        if not self._ended and self.exchange is not None:
            self.exchange.abort()
        self._ended = True
        self._wake()

    async def aclose(self) -> None:
        """:meth:`close`, awaitable (for cleanup tasks)."""
        self.close()


async def engine_events(response: EngineResponse, engine: str) -> AsyncIterator[dict[str, Any]]:
    """Yield each JSON event of an engine's stream until ``[DONE]``.

    Raises:
        EngineFailure: the stream broke, carried an error event, held garbage, or ended
            without ``[DONE]`` (a truncated answer is never taken for success).
    """
    decoder = Decoder(strict=True)
    async for chunk in response.aiter_bytes():
        try:
            events = decoder.feed(chunk)
        except NotEventStream:
            raise EngineFailure(engine, "engine stream is not Server-Sent Events") from None
        for event in events:
            if event.done:
                return
            try:
                data = event.json()
            except ValueError:
                raise EngineFailure(engine, "engine stream holds an event that is not JSON") from None
            if not isinstance(data, dict):
                raise EngineFailure(engine, "engine stream holds an event that is not an object")
            if "error" in data:
                raise EngineFailure(engine, engine_error_message(200, event.data))
            yield data
    raise EngineFailure(engine, "engine stream ended without [DONE]")
