"""The API port's HTTP/1.1 server: its routes, its limits, and the open connections.

A request is read (head and body, within the edge limits), checked by the guard, and given to
its route (:mod:`syshaxd.api.connection`): a path in ``routes`` (the completion routes,
syshaxd's own information routes) to its handler, any other path to ``default`` (pass-through
to the engines). Every handler answers on the connection's
:class:`~syshaxd.api.response.Response`; a relayed answer flows from the engine connection's
callbacks straight to this connection's transport. Connections past the caps of
:mod:`syshaxd.api.gate` are turned away. Accepted sockets get ``TCP_NODELAY``: a small write
must not wait for the client's delayed ACK.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from prometheus_client import CollectorRegistry

from syshaxd.api.connection import Handler, HttpConnection
from syshaxd.api.gate import Gate
from syshaxd.api.guard import Guard
from syshaxd.api.request import Request
from syshaxd.config import EdgeLimits

log = logging.getLogger("syshaxd.api")

__all__ = ["ApiServer", "Handler"]


class ApiServer:
    """Routes, limits and the open connections of the API port."""

    def __init__(self, routes: dict[str, Handler], guard: Guard, max_body: int, default: Handler,
                 limits: EdgeLimits | None = None, registry: CollectorRegistry | None = None) -> None:
        self.routes = routes
        self.default = default
        self.guard = guard
        self.max_body = max_body
        self.limits = limits if limits is not None else EdgeLimits()
        self.gate = Gate(self.limits, registry)  # the edge's metrics go to ``registry``
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
