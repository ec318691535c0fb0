"""The control socket's servers: the first one, and a new one whenever its file is deleted.

A cleanup of the runtime directory (by hand, or by a tool) can delete the socket file under a
running daemon; the console and ``syshax status`` could then never find it again. So the
daemon checks the path every few seconds and makes the socket again (and its lock, when the
lock file went too). The old socket keeps serving the clients already connected to it until
the daemon stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from syshaxd.control import ControlSocket, ControlSocketError
from syshaxd.service.servers import SignalFreeServer, control_server

log = logging.getLogger("syshaxd")

#: Seconds between checks that the control socket's file is still there.
CHECK_INTERVAL = 2.0


class ControlSockets:
    """Every control socket this daemon made, each with its server."""

    def __init__(self, first: ControlSocket, make_app: Callable[[], Any]) -> None:
        self.make_app = make_app
        self.sockets = [first]
        self.servers = [control_server(make_app())]
        self.tasks: list[asyncio.Task[None]] = []

    @property
    def path(self) -> str:
        """The socket's path, for messages."""
        return str(self.sockets[0].path)

    def serve(self) -> asyncio.Task[None]:
        """Start serving the first socket; returns its server's task."""
        task = asyncio.create_task(self.servers[0].serve(sockets=[self.sockets[0].sock]), name="syshax-control")
        self.tasks.append(task)
        return task

    async def keep(self, stop: asyncio.Event, interval: float = CHECK_INTERVAL) -> None:
        """Make the socket again when its file is deleted, until ``stop`` is set."""
        told = ""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                return
            current = self.sockets[-1]
            if current.deleted():
                told = self._remake(current, told)
            elif current.replaced() and told != "replaced":
                log.error("control socket %s now names a file this daemon did not make; the console and "
                          "syshax status cannot reach it until it restarts", current.path)
                told = "replaced"

    def _remake(self, current: ControlSocket, told: str) -> str:
        try:
            fresh = current.remake()
        except ControlSocketError as exc:
            if str(exc) != told:
                log.error("control socket %s was deleted and cannot be made again: %s; the console "
                          "and syshax status cannot reach this daemon (retrying)", current.path, exc)
            return str(exc)
        server = control_server(self.make_app())
        self.sockets.append(fresh)
        self.servers.append(server)
        self.tasks.append(asyncio.create_task(server.serve(sockets=[fresh.sock]), name="syshax-control"))
        log.warning("control socket %s was deleted under the daemon; made it again", current.path)
        return ""

    def exit(self, force: bool = False) -> None:
        """Tell every server to stop (``force``: without waiting for its connections)."""
        for server in self.servers:
            server.should_exit = True
            if force:
                server.force_exit = True

    def close(self) -> None:
        """Close every socket; the newest owns the path and the lock, so it goes first."""
        for made in reversed(self.sockets):
            made.close()


__all__ = ["ControlSockets", "SignalFreeServer"]
