"""The API port's HTTP/1.1 server: an asyncio protocol over ``httptools``' C parser.

A request is read whole (head and body, within the limits), checked by the guard, and given
to its route: the completion routes and the engines' own routes go to the conductor's
handlers, which answer on the connection's :class:`~syshaxd.api.response.Response` -- a
relayed stream then flows from the engine connection's callbacks straight to this
connection's transport -- and everything else to the FastAPI app. Requests on one
connection are answered in order (pipelined ones wait); a client that disconnects cancels
what its request was waiting for. Accepted sockets get ``TCP_NODELAY``: a small write must
not wait for the client's delayed ACK.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httptools

from syshaxd.api.guard import MAX_HEADER_BYTES, Guard
from syshaxd.api.request import Request
from syshaxd.api.response import Response, status_only
from syshaxd.conductor import send_error
from syshaxd.engines import set_nodelay
from syshaxd.errors import ApiError

log = logging.getLogger("syshaxd.api")

#: A route: answers at once (returns None) or returns what to await for the answer.
Handler = Callable[[Request, Response], Awaitable[None] | None]
#: Seconds an idle keep-alive connection is kept. Clients (httpx, the openai client) drop
#: theirs after 5 s; a server that closes at the same moment races them, and a request sent on
#: a connection the server is closing is lost before any byte is answered. Outlive them.
KEEP_ALIVE = 75.0
#: Requests read ahead on one connection (pipelining) before it stops reading.
MAX_QUEUED = 8


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> bytes:
    return ApiError(status, message, type=kind, code=code).json()


class ApiServer:
    """Routes, limits and the open connections of the API port."""

    def __init__(self, routes: dict[str, Handler], guard: Guard, max_body: int, default: Handler) -> None:
        self.routes = routes
        self.default = default
        self.guard = guard
        self.max_body = max_body
        self.connections: set[HttpConnection] = set()
        self.accepting = True
        self._servers: list[asyncio.AbstractServer] = []
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self, sock: socket.socket) -> None:
        """Serve on a listening socket the daemon made (TCP or Unix; more than one may be served)."""
        loop = asyncio.get_running_loop()
        if sock.family == socket.AF_UNIX:
            server = await loop.create_unix_server(lambda: HttpConnection(self), sock=sock, backlog=2048)
        else:
            server = await loop.create_server(lambda: HttpConnection(self), sock=sock, backlog=2048)
        self._servers.append(server)

    @property
    def started(self) -> bool:
        """Whether the server listens."""
        return any(server.is_serving() for server in self._servers)

    def handler(self, request: Request) -> Handler:
        """The route for a request: its own, else the default (the engines', in the daemon)."""
        return self.routes.get(request.path) or self.default

    def closed(self, conn: HttpConnection) -> None:
        """A connection is gone."""
        self.connections.discard(conn)
        if not self.connections:
            self._idle.set()

    def opened(self, conn: HttpConnection) -> None:
        """A connection was accepted."""
        self.connections.add(conn)
        self._idle.clear()

    def abort_all(self) -> None:
        """Drop every connection now (a second stop request)."""
        for conn in list(self.connections):
            conn.abort()

    async def stop(self, grace: float) -> None:
        """Stop accepting; close idle connections now, busy ones after their answer, all after ``grace`` s."""
        self.accepting = False
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.finish_soon()
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except asyncio.TimeoutError:
            log.warning("%d API connections still open after %.0f s: closing them", len(self.connections), grace)
            for conn in list(self.connections):
                conn.abort()
        for server in self._servers:
            await server.wait_closed()


def _failed(request: Request, response: Response, exc: Exception) -> None:
    """An error before or while answering: an OpenAI error object, or the end of what began."""
    if not isinstance(exc, ApiError):
        log.error("internal error on %s %s", request.method, request.path, exc_info=exc)
        exc = ApiError(500, "internal error in syshaxd (logged)", type="internal_error")
    elif response.started:
        log.warning("error after the answer started on %s %s: %s", request.method, request.path, exc)
    send_error(response, exc)


class HttpConnection(asyncio.Protocol):
    """One client connection: requests read, answered in order."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()
        self.response: Response | None = None
        self.task: asyncio.Task[None] | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._refused = False  # a request could not be read: answer it and close
        self._closing = False
        self._writable = True
        self._drained: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._peer: tuple[str, int] | None = None
        self._local: tuple[str, int] | None = None

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        set_nodelay(transport)
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self._peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self._local = (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        self.server.opened(self)
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported here")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")

    def eof_received(self) -> bool:
        # The client closed its side. HTTP clients do that to abandon a request (there is no
        # way to tell a half-close from a close), so the connection ends and what its request
        # waited for is stopped, as when the connection is lost.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self.response is not None:
            self.response.lost()
        if self.task is not None and not self.task.done():
            self.task.cancel()  # what the request waited for (admission, an engine) is abandoned
        self._wake_writers()
        self.server.closed(self)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self._wake_writers()
        if self.response is not None:
            self.response.resume()

    # -- httptools callbacks -------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_size, self._body, self._body_size = b"", [], 0, [], 0
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))
        self._head_size += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        if self._head_size > MAX_HEADER_BYTES:
            self._refuse(431, f"request headers total {self._head_size} bytes, over the limit of {MAX_HEADER_BYTES}",
                         code="request_header_fields_too_large")
            return
        declared = next((v for k, v in self._headers if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > self.server.max_body:
            self._refuse(413, f"request body of {int(declared)} bytes is over the limit of {self.server.max_body} "
                         "bytes (services.conductor.max_body_bytes)")
            return
        if any(k == b"expect" and v.lower() == b"100-continue" for k, v in self._headers) and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_size += len(body)
        if self._body_size > self.server.max_body:
            self._refuse(413, f"request body is over the limit of {self.server.max_body} bytes "
                         "(services.conductor.max_body_bytes)")
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        try:
            parsed = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            self._refuse(400, "malformed request target")
            return
        raw_path = parsed.path or b"/"
        request = Request(self.parser.get_method().decode("latin-1"), raw_path,
                          raw_path.decode("latin-1"), parsed.query or b"", self.parser.get_http_version(),
                          self._headers, b"".join(self._body), self._peer, self._local,
                          keep_alive=self.parser.should_keep_alive())
        self.queue.append(request)
        if len(self.queue) >= MAX_QUEUED and self.transport is not None:
            self.transport.pause_reading()
        if self.response is None:
            self._next()

    # -- answering -----------------------------------------------------------------

    def _next(self) -> None:
        if self.transport is None or not self.queue:
            if self._closing and self.transport is not None:
                self.transport.close()
            else:
                self._arm_idle()
            return
        request = self.queue.popleft()
        if self.transport is not None and len(self.queue) < MAX_QUEUED // 2:
            self.transport.resume_reading()
        keep = request.keep_alive and not self._closing and self.server.accepting
        response = self.response = Response(self, keep_alive=keep, head_only=request.method == "HEAD",
                                            version=request.version.encode())
        try:
            denied = self.server.guard.check(request)
            if denied is not None:
                raise denied
            pending = self.server.handler(request)(request, response)
        except Exception as exc:
            _failed(request, response, exc)
            return
        if pending is not None:
            self.task = asyncio.ensure_future(self._answer(request, response, pending))

    async def _answer(self, request: Request, response: Response, pending: Awaitable[Any]) -> None:
        try:
            await pending
        except asyncio.CancelledError:
            pass  # the client left
        except Exception as exc:
            _failed(request, response, exc)

    # -- the Carrier protocol (for Response) -----------------------------------------

    def write(self, data: bytes) -> None:
        """Write bytes to the client."""
        if self.transport is not None:
            self.transport.write(data)

    @property
    def writable(self) -> bool:
        """Whether the client's buffer has room."""
        return self._writable

    async def wait_writable(self) -> None:
        """Return once the client's buffer has room or the client is gone."""
        if self._writable or self.transport is None:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def response_done(self, response: Response) -> None:
        """The current response ended: take the next request, or close."""
        if response is not self.response:
            return
        self.response = None
        if not response.keep_alive:
            self._closing = True
        self._next()

    # -- lifecycle -------------------------------------------------------------------

    def finish_soon(self) -> None:
        """Close after the answer in progress (the daemon is stopping); now if idle."""
        self._closing = True
        if self.response is None and not self.queue and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection now."""
        if self.transport is not None:
            self.transport.abort()

    def _refuse(self, status: int, message: str, code: str | None = None) -> None:
        self._refused = True
        self.queue.clear()
        if self.response is None and self.transport is not None:
            status_only(self, status, _error(status, message, code=code))
        if self.transport is not None:
            self.transport.close()

    def _arm_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = asyncio.get_running_loop().call_later(KEEP_ALIVE, self._idle_close)

    def _idle_close(self) -> None:
        if self.response is None and not self.queue and self.transport is not None:
            self.transport.close()

    def _wake_writers(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None
