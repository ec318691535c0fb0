"""Running uvicorn servers on sockets the daemon made, with the daemon owning the signals."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator
from typing import Any

import uvicorn

from syshaxd.control import peercred_protocol_class


class BindError(Exception):
    """A listening socket cannot be created; the message is for the operator."""


#: Seconds between the control server's checks whether to stop.
TICK = 0.5


class SignalFreeServer(uvicorn.Server):
    """uvicorn without its own signal handling.

    uvicorn (>= 0.29) re-raises a captured SIGTERM after ``serve()`` returns, which would
    kill the process before the daemon's cleanup runs; the daemon installs its own handlers.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def main_loop(self) -> None:
        """uvicorn's loop, waking twice a second instead of ten times (an idle daemon costs less).

        ``on_tick`` refreshes the Date header once per ten ticks: every fifth tick here is
        about the same second.
        """
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 5) % 864000
            await asyncio.sleep(TICK)


def http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's automatic choice of HTTP implementation (httptools if installed, else h11)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return AutoHTTPProtocol


def control_server(app: Any, *, graceful: float = 1.0) -> SignalFreeServer:
    """A server for the control API: peer credentials on every request, no lifespan, quiet."""
    return SignalFreeServer(
        uvicorn.Config(
            app,
            http=peercred_protocol_class(http_protocol()),
            lifespan="off",
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=max(1, int(graceful)),
        )
    )


async def wait_started(servers: dict[SignalFreeServer, asyncio.Task[None]]) -> None:
    """Return once every server listens; raise BindError if one gave up first."""
    while not all(s.started for s in servers):
        for task in servers.values():
            if task.done():
                exc = task.exception() if not task.cancelled() else None
                raise BindError(f"a server failed to start: {exc or 'it exited'}")
        await asyncio.sleep(0.01)


def bind_tcp(host: str, port: int, what: str = "services.conductor", *, reuse_port: bool = False) -> socket.socket:
    """A listening, non-blocking TCP socket, or BindError saying why not.

    ``reuse_port``: further sockets may listen on the same address (``SO_REUSEPORT``), each
    taking its share of new connections: one per API worker process.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BindError(f"cannot resolve {what}.host {host!r}: {exc.strerror}") from None
    family, _, proto, _, address = infos[0]
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP.
    sock = socket.socket(family, socket.SOCK_STREAM, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise BindError(f"cannot listen on {host}:{port} ({what}): {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def describe(sock: socket.socket) -> str:
    """``127.0.0.1:8010``, ``[::1]:8010`` or a Unix path, for logs."""
    name = sock.getsockname()
    if isinstance(name, tuple):
        host, port = name[0], name[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(name)
