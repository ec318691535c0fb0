"""The API routes that are not on the token path, served by a FastAPI app through a small ASGI bridge.

``/v1/models``, ``/health``, ``/metrics``, the OpenAPI document and the docs pages gain
nothing from being written by hand: FastAPI serves them, called here the way an ASGI server
would, with the request already read and the answer written to the connection's
:class:`~syshaxd.api.response.Response`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import ASGIApp, Message

from syshaxd.api.request import Request
from syshaxd.api.response import Response

__all__ = ["Request", "serve_asgi"]  # Request is re-exported for the routes that import it from here


async def serve_asgi(app: ASGIApp, request: Request, response: Response) -> None:
    """Run ``app`` for ``request``; its answer goes to ``response``."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.version,
        "method": request.method,
        "scheme": "http",
        "path": request.path,
        "raw_path": request.raw_path,
        "query_string": request.query,
        "root_path": "",
        "headers": request.headers,
        "client": request.client,
        "server": request.server,
    }
    sent_body = False
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def left() -> None:
        if not gone.done():
            gone.set_result(None)

    response.when_gone(left)

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await gone
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", [])]
            length = next((int(v) for k, v in headers if k == b"content-length"), None)
            response.start(message["status"], headers, length)
        elif message["type"] == "http.response.body":
            response.write(message.get("body", b""))
            if not message.get("more_body", False):
                response.end()
            else:
                await response.drain()

    await app(scope, receive, send)
    if not response.ended:  # an app that returned without finishing its answer
        response.end()
