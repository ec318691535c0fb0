"""Run one or two simulated engines on TCP ports until SIGTERM / SIGINT.

Engines in one process share a KvStore, so a pair hands KV caches over in memory. The
sockets are bound here (port 0 picks a free port) and the bound ports are written to
``--ready-file`` as JSON once every engine answers, for launchers that must not guess
ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from rich.console import Console
from rich.table import Table

from sim.engine import SimEngine
from sim.server import http_app


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (it re-raises SIGTERM after serve())."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0 = any free port).

    Created with ``IPPROTO_TCP`` on purpose: asyncio sets ``TCP_NODELAY`` on an accepted
    connection only when the socket says its protocol is TCP, and accepted sockets take
    the listener's. With the default protocol 0 a small write (an SSE chunk) could wait
    for the client's delayed ACK (Nagle).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _write_ready(path: Path, engines: list[SimEngine]) -> None:
    data = {
        "pid": os.getpid(),
        "engines": [
            {"name": e.name, "port": e.port, "url": _url(e.host, e.port), "profile": e.profile.name,
             "dialect": e.dialect, "engine_id": e.engine_id}
            for e in engines
        ],
    }
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _table(engines: list[SimEngine], title: str, final: bool) -> Table:
    table = Table(title=title)
    for col in ("engine", "url", "profile", "dialect", "speed"):
        table.add_column(col)
    if final:
        for col in ("finished", "prompt tok", "gen tok", "preempted"):
            table.add_column(col, justify="right")
    for e in engines:
        row = [e.name, _url(e.host, e.port), e.profile.name, e.dialect, f"{e.live.speed:g}x"]
        if final:
            c = e.live.core.counters
            row += [str(sum(c.finished.values())), str(c.prompt_tokens), str(c.generation_tokens), str(c.preemptions)]
        table.add_row(*row)
    return table


def make_server(engine: SimEngine, log_level: str = "warning") -> uvicorn.Server:
    """The uvicorn server of one engine (serve it on a socket from :func:`bind`)."""
    config = uvicorn.Config(http_app(engine), log_level=log_level, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=1, timeout_keep_alive=30)
    return _Server(config)


async def serve(engines: list[SimEngine], sockets: list[socket.socket], ready_file: Path | None = None,
                log_level: str = "warning") -> None:
    """Serve every engine on its socket until a signal arrives or a server fails."""
    console = Console(stderr=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    servers: list[uvicorn.Server] = []
    for engine, sock in zip(engines, sockets, strict=True):
        engine.port = sock.getsockname()[1]
        servers.append(make_server(engine, log_level))
        engine.live.start()
    tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(servers, sockets, strict=True)]
    while not all(s.started for s in servers):
        if any(t.done() for t in tasks):
            break
        await asyncio.sleep(0.01)
    if all(s.started for s in servers):
        if ready_file is not None:
            _write_ready(ready_file, engines)
        console.print(_table(engines, "syshax engine simulator", final=False))
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
    for s in servers:
        s.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    for engine in engines:
        await engine.live.stop()
        engine.store.drop_origin(engine.name)
    console.print(_table(engines, "simulator summary", final=True))
    sys.stderr.flush()
