"""Talking to one engine: requests over its connection pool, failures classified for resubmission.

Two ways to read an answer. The relay gives a :class:`~syshaxd.engines.connection.Sink` to
:meth:`EngineClient.exchange` and is called back as bytes arrive (the hot path: no task per
response). Everything else -- splits, assembled answers, small JSON calls -- awaits an
:class:`EngineResponse`. The engine's own side APIs that are not on any request's path
(llama-server's ``/slots``, ``/v1/models``) go through ``http``, an httpx client. What the
conductor counts against an engine is not kept here but in its books
(:mod:`syshaxd.conductor.books`).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from syshaxd.config import EngineSpec
from syshaxd.engines.connection import (
    ConnectionLost,
    ConnectionPool,
    EngineConnection,
    PoolClosed,
    Sink,
)
from syshaxd.errors import engine_error_message
from syshaxd.snapshot import Device
from syshaxd.sse import Decoder, NotEventStream

#: Chunks an awaited response holds before it stops reading the engine (a slow consumer).
HIGH_WATER = 64


class EngineFailure(Exception):
    """An engine did not answer usefully (connection, 5xx, garbage): worth trying elsewhere."""

    def __init__(self, engine: str, message: str, status: int = 502) -> None:
        super().__init__(f"{engine}: {message}")
        self.engine = engine
        self.message = message
        self.status = status


class EngineRejected(Exception):
    """An engine refused the request itself (4xx): the client's problem, not the engine's."""

    def __init__(self, engine: str, status: int, body: bytes) -> None:
        super().__init__(f"{engine}: HTTP {status}")
        self.engine = engine
        self.status = status
        self.body = body


def describe_error(exc: BaseException) -> str:
    """A one-line description of a failure to reach or read an engine."""
    if isinstance(exc, PoolClosed):
        return str(exc)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused or unreachable"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, ConnectionLost | httpx.RemoteProtocolError):
        return "connection closed by the engine"
    if isinstance(exc, httpx.ConnectError | OSError):
        return "connection refused or unreachable"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


describe_http_error = describe_error  # the name httpx-era callers know


class EngineClient:
    """One engine: its connection pool, and its side APIs over httpx."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        url = urlsplit(spec.url)
        if url.scheme != "http":
            raise ValueError(f"engines are reached over plain http://, not {url.scheme}:// ({spec.url})")
        self._prefix = url.path.rstrip("/").encode()
        self._host = (url.netloc or "engine").encode()
        self.pool = ConnectionPool(url.hostname or "127.0.0.1", url.port or 80)
        self.http = httpx.AsyncClient(base_url=spec.url, timeout=httpx.Timeout(10.0), headers={"User-Agent": "syshaxd"})
        """An httpx client, for the engine's own APIs that no request waits on (llama-server's /slots)."""

    def __repr__(self) -> str:
        return f"EngineClient({self.spec.name!r}, {self.spec.url!r})"

    @property
    def name(self) -> str:
        """The engine's name."""
        return self.spec.name

    @property
    def device(self) -> Device:
        """The device the engine runs on."""
        return self.spec.device

    def request_bytes(self, method: bytes, path: str, body: bytes, headers: Mapping[str, str] | None = None,
                      content_type: bytes = b"application/json") -> bytes:
        """One HTTP/1.1 request as written on the wire."""
        extra = b"".join(b"%s: %s\r\n" % (k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items())
        return (b"%s %s%s HTTP/1.1\r\nhost: %s\r\nuser-agent: syshaxd\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
                b"%s\r\n" % (method, self._prefix, path.encode("latin-1"), self._host, content_type, len(body), extra)
                + body)

    def raw_request(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                    request_id: str) -> bytes:
        """A client's request as it goes on to the engine: its own headers (the caller dropped the
        hop-by-hop ones), this connection's framing, and the request id."""
        extra = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
        return (b"%s %s%s HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\nx-request-id: %s\r\n%s\r\n"
                % (method, self._prefix, target, self._host, len(body), request_id.encode("latin-1"), extra) + body)

    def exchange_on(self, conn: EngineConnection, request: bytes, sink: Sink) -> Exchange:
        """:meth:`exchange` on a connection already taken from the pool (``pool.take_idle()``)."""
        exchange = Exchange(self, request, sink)
        exchange.start(conn)
        return exchange

    async def exchange(self, request: bytes, sink: Sink) -> Exchange:
        """Send a whole request; the answer goes to ``sink``, called back as bytes arrive.

        Raises:
            EngineFailure: the engine cannot be reached.
        """
        try:
            conn = await self.pool.acquire()
        except OSError as exc:
            raise EngineFailure(self.name, describe_error(exc)) from None
        exchange = Exchange(self, request, sink)
        exchange.start(conn)
        return exchange

    async def open_stream(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> EngineResponse:
        """POST and return the response once its status is in, its body not yet read.

        Raises:
            EngineFailure: the engine is unreachable or answered 5xx.
            EngineRejected: the engine answered 4xx.
        """
        response = EngineResponse(self.name)
        response.exchange = await self.exchange(self.request_bytes(b"POST", path, body, headers), response)
        try:
            status = await response.head()
        except BaseException:
            response.close()
            raise
        if status != 200:
            try:
                data = await response.aread()
            except EngineFailure:
                data = b""
            if 400 <= status < 500 and status not in (408, 429):
                raise EngineRejected(self.name, status, data)
            raise EngineFailure(self.name, engine_error_message(status, data), status=status)
        return response

    async def post_json(self, path: str, body: bytes, headers: Mapping[str, str] | None = None
                        ) -> tuple[dict[str, Any], bytes]:
        """POST and parse a JSON object answer; garbage is an EngineFailure."""
        response = await self.open_stream(path, body, headers)
        try:
            data = await response.aread()
        finally:
            response.close()
        parsed = json_answer(self.name, data)
        return parsed, data

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` over the pool: the status and the whole body.

        Raises:
            EngineFailure: the engine cannot be reached or broke off the answer.
        """
        response = EngineResponse(self.name)
        response.exchange = await self.exchange(self.request_bytes(b"GET", path, b""), response)
        try:
            status = await response.head()
            return status, await response.aread()
        finally:
            response.close()

    async def get_json(self, path: str, timeout: float) -> Any:
        """GET ``path`` and parse its JSON answer; None when the engine did not answer 200 with JSON."""
        try:
            response = await self.http.get(path, timeout=timeout)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    async def aclose(self) -> None:
        """Close every connection (ends any answer still streaming) and the side client."""
        self.pool.close()
        await self.http.aclose()


def json_answer(engine: str, data: bytes) -> dict[str, Any]:
    """A 200 answer's JSON object, or the EngineFailure it amounts to (garbage, an error object)."""
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise EngineFailure(engine, "engine answered 200 with a body that is not JSON") from None
    if not isinstance(parsed, dict):
        raise EngineFailure(engine, "engine answered 200 with JSON that is not an object")
    if "error" in parsed and "choices" not in parsed:
        raise EngineFailure(engine, engine_error_message(200, data))
    return parsed


class Exchange:
    """One request and its answer on a connection of the pool; the sink's handle to stop it.

    A request sent on a reused connection that the engine closed before answering (it timed
    the connection out as the request left) goes again, once, on a new connection.
    """

    def __init__(self, client: EngineClient, request: bytes, sink: Sink) -> None:
        self.client = client
        self.request = request
        self.sink = sink
        self.conn: EngineConnection | None = None
        self.aborted = False
        self._retried = False

    def start(self, conn: EngineConnection) -> None:
        """Send the request on ``conn``."""
        self.conn = conn
        conn.send(self.request, self)

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

    def on_end(self) -> None:
        self.sink.on_end()

    def on_lost(self, exc: BaseException) -> None:
        conn = self.conn
        if self.aborted or self._retried or conn is None or not conn.reused or conn.answered:
            self.sink.on_lost(exc)
            return
        self._retried = True
        asyncio.ensure_future(self._again(exc))

    async def _again(self, first: BaseException) -> None:
        try:
            conn = await self.client.pool.acquire()
        except OSError:
            self.sink.on_lost(first)
            return
        if self.aborted:
            self.client.pool.release(conn)
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

    def on_end(self) -> None:
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
