"""The completion routes as plain ASGI: the hot path of every token the conductor relays.

``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/chat/pd_disagg`` carry every
streamed token. Served through FastAPI they paid, per request, for dependency exit stacks, a
``Request`` object, and a ``StreamingResponse`` whose anyio task group runs a second task
just to notice a disconnect; per chunk, for that machinery's sends. Here a request is one task
that reads the body, asks the conductor, and sends the answer, plus one task that waits for
the client to leave (which cancels the first). Everything else on the port stays FastAPI, and
these routes stay in its OpenAPI document (:mod:`syshaxd.api.openapi`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from syshaxd.api.body import parse_request
from syshaxd.conductor import Answer, Dispatcher
from syshaxd.config import Config
from syshaxd.errors import ApiError, error_body
from syshaxd.request import Kind
from syshaxd.routing import Mode

log = logging.getLogger("syshaxd.api")

#: path -> (request kind, forced mode, summary for the API docs)
ROUTES: dict[str, tuple[Kind, Mode | None, str]] = {
    "/v1/chat/completions": ("chat", None, "OpenAI chat completions, routed to the GPU, the CPU, or split"),
    "/v1/completions": ("completion", None, "OpenAI (legacy) completions"),
    "/v1/chat/pd_disagg": ("chat", Mode.PD_SPLIT,
                           "Chat completion always split: prefill on the GPU, decode on the CPU (as sysHAX offers)"),
}

_EVENT_STREAM = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
_JSON = (b"content-type", b"application/json")


class ClientGone(Exception):
    """The client disconnected before its request body arrived."""


class CompletionRoutes:
    """ASGI middleware that serves the completion routes itself and passes the rest on."""

    def __init__(self, app: ASGIApp, dispatcher: Dispatcher, config: Config) -> None:
        self.app = app
        self.dispatcher = dispatcher
        self.config = config
        self.max_body = config.services.conductor.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            message = f"{scope['method']} {scope['path']}: Method Not Allowed"
            await _send_json(send, 405, error_body(message, type="invalid_request_error", code="405"),
                             {"Allow": "POST"})
            return
        kind, forced, _ = route
        started = [False]

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                started[0] = True
            await send(message)

        try:
            await self._serve(scope, receive, tracked, kind, forced)
        except ClientGone:
            pass  # nobody is left to answer
        except ApiError as exc:
            if not started[0]:
                await _send_json(send, exc.status, exc.body(), exc.headers)
        except Exception:
            log.exception("internal error on POST %s", scope["path"])
            if not started[0]:
                await _send_json(send, 500, error_body("internal error in syshaxd (logged)", type="internal_error",
                                                       code="500"))

    async def _serve(self, scope: Scope, receive: Receive, send: Send, kind: Kind, forced: Mode | None) -> None:
        headers = dict(scope["headers"])
        _check_content_type(headers.get(b"content-type"))
        raw = await _read_body(receive, headers.get(b"content-length"), self.max_body)
        parsed = parse_request(raw, kind, self.config)
        job = asyncio.ensure_future(self._answer(parsed, forced, send))
        gone = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not job.done():
            # The client left while its request waited, started or streamed: stop it upstream.
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
            return
        job.result()  # an ApiError before the answer started becomes the error response

    async def _answer(self, parsed: Any, forced: Mode | None, send: Send) -> None:
        answer = await self.dispatcher.serve(parsed, forced)
        try:
            if answer.stream is None:
                await _send_body(send, answer.status, answer.body or b"", [_JSON, *_encode(answer.headers)])
            else:
                await self._stream(answer, send)
        finally:
            if answer.cleanup is not None:
                answer.cleanup()

    @staticmethod
    async def _stream(answer: Answer, send: Send) -> None:
        assert answer.stream is not None
        await send({"type": "http.response.start", "status": answer.status,
                    "headers": [*_EVENT_STREAM, *_encode(answer.headers)]})
        stream = answer.stream
        try:
            async for chunk in stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _encode(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def _send_body(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    await _send_body(send, status, data, [_JSON, *_encode(headers or {})])


def _check_content_type(declared: bytes | None) -> None:
    # As vLLM does (415), but a missing Content-Type is let through: `curl -d` clients exist.
    if declared is None:
        return
    text = declared.decode("latin-1")
    media = text.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(415, f"unsupported Content-Type {text[:80]!r}: send the body as application/json",
                       code="unsupported_media_type")


async def _read_body(receive: Receive, declared: bytes | None, limit: int) -> bytes:
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise ApiError(400, "Content-Length header is not a number") from None
        if length > limit:
            raise ApiError(413, f"request body of {length} bytes is over the limit of {limit} bytes "
                           "(services.conductor.max_body_bytes)", type="invalid_request_error")
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body is over the limit of {limit} bytes (services.conductor.max_body_bytes)")
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
