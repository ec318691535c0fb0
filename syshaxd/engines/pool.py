"""Keep-alive connections to one engine, reused newest first, at a constant cost per request.

httpx's own pool (httpcore 1.0) walks every pooled connection on each request and on each
response close, and its keep-alive eviction counts the connections once per connection
(quadratic; encode/httpcore#1035, open). With 64 concurrent streams that bookkeeping was
42% of syshaxd's CPU (py-spy, docs/benchmarks.md). A conductor needs far less than a
general pool: one origin per client, HTTP/1.1 only, no proxies, no HTTP/2. This transport
keeps idle connections in a stack: a request takes the most recently used one whose
keep-alive has not expired and which the engine has not closed, else opens a new one; a
response that ends cleanly puts its connection back, anything else closes it. A request
looks only at the connection it takes and at the oldest idle one (closed once it has
outlived its keep-alive).

It plugs into ``httpx.AsyncClient(transport=...)``: requests, responses, timeouts and
exceptions are httpx's own, so callers cannot tell the difference.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

#: httpcore's exceptions and what httpx raises for them, most specific first.
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextmanager
def _as_httpx() -> Iterator[None]:
    """Re-raise httpcore's exceptions as the httpx ones callers catch."""
    try:
        yield
    except httpcore.ConnectionNotAvailable:
        raise
    except Exception as exc:
        for core, mapped in _EXCEPTIONS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


class EngineTransport(httpx.AsyncBaseTransport):
    """An httpx transport with a stack of idle HTTP/1.1 connections (see the module docstring)."""

    def __init__(self, max_idle: int = 512, keepalive_expiry: float = 5.0) -> None:
        self._max_idle = max_idle
        self._keepalive_expiry = keepalive_expiry
        self._backend = httpcore.AnyIOBackend()
        self._idle: deque[httpcore.AsyncHTTP11Connection] = deque()  # oldest left, newest right
        self._busy: set[httpcore.AsyncHTTP11Connection] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.opened = 0  # connections opened, ever: how well keep-alive works (tests read it)

    @property
    def idle(self) -> int:
        """Idle connections kept open."""
        return len(self._idle)

    @property
    def busy(self) -> int:
        """Connections carrying a request or a response being read."""
        return len(self._busy)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"engines are reached over plain http://, not {url.scheme}:// ({url})")
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,  # type: ignore[arg-type]  # httpx streams are async iterables of bytes
            extensions=request.extensions,
        )
        # A connection closed under the request before it sent anything (the pool closing, see
        # aclose) refuses it with ConnectionNotAvailable: take another, unless the pool is closed.
        # An engine that closed an idle connection is caught by has_expired() at checkout, as in
        # httpcore's own pool; if its FIN arrives just after, the request fails as it would there.
        while True:
            conn = await self._checkout(core)
            try:
                with _as_httpx():
                    response = await conn.handle_async_request(core)
            except httpcore.ConnectionNotAvailable:
                self._drop(conn)
                continue
            except BaseException:
                # httpcore closes a connection that failed mid-request, but not one cancelled
                # while it waited for the connection's lock, before its first byte: close it here.
                self._drop(conn)
                raise
            break
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream, conn, self),  # type: ignore[arg-type]
            extensions=response.extensions,
        )

    async def _checkout(self, request: httpcore.Request) -> httpcore.AsyncHTTP11Connection:
        """The newest usable idle connection to the request's origin, or a new one.

        A client of this transport talks to one engine (its ``base_url``); an idle connection to
        another origin is closed rather than kept, so mixing origins works but is not pooled.
        """
        if self._closed:
            raise httpx.ConnectError("the engine's connection pool is closed")
        origin = request.url.origin
        self._expire_oldest()
        while self._idle:
            conn = self._idle.pop()
            if conn.can_handle_request(origin) and conn.is_available() and not conn.has_expired():
                self._busy.add(conn)
                return conn
            self._close_soon(conn)
        timeout = request.extensions.get("timeout", {}).get("connect")
        with _as_httpx():
            stream = await self._backend.connect_tcp(
                request.url.host.decode("ascii"), request.url.port or 80, timeout=timeout
            )
        if self._closed:  # closed while connecting: nobody would close this one
            await stream.aclose()
            raise httpx.ConnectError("the engine's connection pool is closed")
        conn = httpcore.AsyncHTTP11Connection(origin=origin, stream=stream, keepalive_expiry=self._keepalive_expiry)
        self.opened += 1
        self._busy.add(conn)
        return conn

    async def _release(self, conn: httpcore.AsyncHTTP11Connection) -> None:
        """A response was closed: keep its connection if it ended cleanly, else close it."""
        self._busy.discard(conn)
        if conn.is_idle() and not self._closed and len(self._idle) < self._max_idle:
            self._idle.append(conn)
        elif not conn.is_closed():
            await conn.aclose()

    def _expire_oldest(self) -> None:
        """Close idle connections at the old end that outlived their keep-alive (or were closed)."""
        while self._idle and self._idle[0].has_expired():
            self._close_soon(self._idle.popleft())

    def _drop(self, conn: httpcore.AsyncHTTP11Connection) -> None:
        """Forget a connection whose request failed; close it if httpcore has not."""
        self._busy.discard(conn)
        if not conn.is_closed():
            self._close_soon(conn)

    def _close_soon(self, conn: httpcore.AsyncHTTP11Connection) -> None:
        task = asyncio.get_running_loop().create_task(conn.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every connection, busy ones too: their readers see the stream end with an error."""
        self._closed = True
        conns = [*self._idle, *self._busy]
        self._idle.clear()
        self._busy.clear()
        # Each close runs to the end even if another fails or this task is cancelled.
        closing = [*self._closing, *(asyncio.ensure_future(conn.aclose()) for conn in conns)]
        if closing:
            await asyncio.shield(asyncio.gather(*closing, return_exceptions=True))


class _Body(httpx.AsyncByteStream):
    """A response body that hands its connection back to the pool when closed."""

    def __init__(self, stream: Any, conn: httpcore.AsyncHTTP11Connection, pool: EngineTransport) -> None:
        self._stream = stream
        self._conn = conn
        self._pool = pool
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            with _as_httpx():
                await self._stream.aclose()
        finally:
            await self._pool._release(self._conn)
