"""The API port's server alone, in a thread with its own event loop, answering every request with an echo.

For the differential test: thousands of generated requests, each on its own connection,
need the server's parsing and nothing else (no engines, no key); each request's answer says
what the server took (method, target and body length), so a test can tell a parse from a
refusal.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager

import uvloop

from syshaxd.api.guard import Guard
from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.api.server import ApiServer
from syshaxd.config import EdgeLimits
from syshaxd.service.servers import bind_tcp


def echo(request: Request, response: Response) -> Awaitable[None] | None:
    """200 with ``METHOD target body-length``."""
    body = b"%s %s?%s %d" % (request.method.encode(), request.raw_path, request.query, len(request.body))
    response.start(200, [(b"content-type", b"text/plain")], len(body))
    response.write(body)
    response.end()
    return None


@contextmanager
def echo_server(limits: EdgeLimits, max_body: int = 1 << 20) -> Iterator[str]:
    """Serve :func:`echo` on a loopback port; yields its URL."""
    sock = bind_tcp("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    started = threading.Event()
    loop_box: list[asyncio.AbstractEventLoop] = []
    stop_box: list[asyncio.Event] = []

    async def main() -> None:
        server = ApiServer({}, Guard(None), max_body, default=echo, limits=limits)
        await server.start(sock)
        stop = asyncio.Event()
        loop_box.append(asyncio.get_running_loop())
        stop_box.append(stop)
        started.set()
        await stop.wait()
        server.abort_all()
        await server.stop(1.0)

    thread = threading.Thread(target=uvloop.run, args=(main(),), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the in-process API server did not start")
    try:
        yield url
    finally:
        loop_box[0].call_soon_threadsafe(stop_box[0].set)
        thread.join(10)
        sock.close()
