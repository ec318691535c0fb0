"""The OpenAI-compatible HTTP API on the conductor's TCP port, plus /health and /metrics."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from syshaxd import __version__
from syshaxd.conductor import Conductor
from syshaxd.config import Config
from syshaxd.dispatch import Answer
from syshaxd.errors import ApiError, error_body
from syshaxd.policy.base import Mode
from syshaxd.requests import Kind, parse_request
from syshaxd.snapshot import EngineState

log = logging.getLogger("syshaxd.api")

#: Largest request head (all header names and values) accepted; 431 above. h11 alone bounds
#: headers only when they span several reads, so a large head sent at once would pass.
MAX_HEADER_BYTES = 64 * 1024

_CHAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
            },
        },
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number"},
    },
}
_COMPLETION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "model": {"type": "string"},
        "prompt": {"type": "string"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number"},
    },
}


def _body_doc(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


class RelayResponse(StreamingResponse):
    """A streaming response that always runs the answer's cleanup, however the stream ends."""

    def __init__(self, answer: Answer) -> None:
        assert answer.stream is not None
        super().__init__(answer.stream, status_code=answer.status, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", **answer.headers})
        self._cleanup = answer.cleanup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._cleanup is not None:
                self._cleanup()


class GuardMiddleware:
    """Header size limit and the API key, as plain ASGI.

    Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) pipes every streamed chunk
    through an extra memory stream and task; on the token-streaming hot path that costs
    more than everything else the conductor does.
    """

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        size = sum(len(name) + len(value) + 4 for name, value in headers)
        if size > MAX_HEADER_BYTES:
            response = JSONResponse(
                error_body(f"request headers total {size} bytes, over the limit of {MAX_HEADER_BYTES}",
                           type="invalid_request_error", code="request_header_fields_too_large"),
                status_code=431,
            )
            await response(scope, receive, send)
            return
        if self.api_key and scope["path"].startswith("/v1/"):
            token = b""
            for name, value in headers:
                if name == b"authorization":
                    scheme, _, token = value.partition(b" ")
                    token = token.strip() if scheme.lower() == b"bearer" else b""
                    break
            if not hmac.compare_digest(token, self.api_key):
                response = JSONResponse(
                    error_body("missing or invalid API key: send 'Authorization: Bearer <key>'",
                               type="invalid_request_error", code="invalid_api_key"),
                    status_code=401, headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _error_response(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise ApiError(413, f"request body of {int(declared)} bytes is over the limit of {limit} bytes "
                               "(services.conductor.max_body_bytes)", type="invalid_request_error")
        except ValueError:
            raise ApiError(400, "Content-Length header is not a number") from None
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"request body is over the limit of {limit} bytes "
                               "(services.conductor.max_body_bytes)")
            chunks.append(chunk)
    except ClientDisconnect:
        # Nobody will read this answer; it only keeps the disconnect out of the error log.
        raise ApiError(400, f"the client disconnected after {size} bytes of the body") from None
    return b"".join(chunks)


def _check_content_type(request: Request) -> None:
    # As vLLM does (415), but a missing Content-Type is let through: `curl -d` clients exist.
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(415, f"unsupported Content-Type {declared[:80]!r}: send the body as application/json",
                       code="unsupported_media_type")


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def create_api_app(conductor: Conductor, config: Config) -> FastAPI:
    """The conductor's FastAPI app."""
    app = FastAPI(
        title="syshax",
        version=__version__,
        description="One OpenAI-compatible endpoint in front of a GPU and a CPU inference engine.",
    )
    service = config.services.conductor
    api_key = service.api_key.get_secret_value() if service.api_key else None
    models_cache: dict[str, Any] = {"at": 0.0, "body": None}

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(error_body(message, type=kind, code=str(exc.status_code)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal error in syshaxd (logged)", type="internal_error", code="500"),
                            status_code=500)

    app.add_middleware(GuardMiddleware, api_key=api_key)

    async def serve(request: Request, kind: Kind, forced: Mode | None = None) -> Response:
        _check_content_type(request)
        raw = await _read_body(request, service.max_body_bytes)
        parsed = parse_request(raw, kind, config)
        work = asyncio.ensure_future(conductor.dispatcher.serve(parsed, forced))
        gone = asyncio.ensure_future(_wait_disconnect(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not work.done():
            # The client left while its request waited or started: stop it upstream now.
            work.cancel()
            try:
                await work
            except (asyncio.CancelledError, ApiError):
                pass
            return Response(status_code=499)
        answer = work.result()
        if answer.stream is not None:
            return RelayResponse(answer)
        return Response(answer.body, status_code=answer.status, media_type="application/json",
                        headers=answer.headers)

    @app.post("/v1/chat/completions", openapi_extra=_body_doc(_CHAT_SCHEMA))
    async def chat(request: Request) -> Response:
        """OpenAI chat completions, routed to the GPU, the CPU, or split between them."""
        return await serve(request, "chat")

    @app.post("/v1/completions", openapi_extra=_body_doc(_COMPLETION_SCHEMA))
    async def completions(request: Request) -> Response:
        """OpenAI (legacy) completions."""
        return await serve(request, "completion")

    @app.post("/v1/chat/pd_disagg", openapi_extra=_body_doc(_CHAT_SCHEMA))
    async def pd_disagg(request: Request) -> Response:
        """Chat completion always split: prefill on the GPU, decode on the CPU (as sysHAX offers)."""
        return await serve(request, "chat", Mode.PD_SPLIT)

    @app.get("/v1/models")
    async def models() -> Response:
        """The models the engines serve."""
        if models_cache["body"] is not None and time.monotonic() - models_cache["at"] < 5.0:
            return JSONResponse(models_cache["body"])
        ups = list(conductor.upstreams.values())
        results = await asyncio.gather(*(up.client.get("/v1/models", timeout=3.0) for up in ups),
                                       return_exceptions=True)
        seen: dict[str, dict[str, Any]] = {}
        for up, result in zip(ups, results, strict=True):
            if isinstance(result, httpx.Response) and result.status_code == 200:
                try:
                    data = result.json().get("data", [])
                except ValueError:
                    continue
                for item in data if isinstance(data, list) else []:
                    if isinstance(item, dict) and isinstance(item.get("id"), str):
                        entry = seen.setdefault(item["id"], {**item, "engines": []})
                        entry["engines"].append(up.name)
        if not seen:
            raise ApiError(503, "no engine answered GET /v1/models", type="service_unavailable")
        body = {"object": "list", "data": list(seen.values())}
        models_cache.update(at=time.monotonic(), body=body)
        return JSONResponse(body)

    @app.get("/health")
    async def health() -> JSONResponse:
        """ok when every engine is up; degraded (with reasons) when some are not; 503 when none can serve."""
        snap = conductor.live_snapshot()
        reasons = []
        engines = {}
        for view in snap.engines:
            engines[view.name] = {"device": view.device, "state": view.state.value,
                                  "enabled": view.enabled, "draining": view.draining}
            if view.state is not EngineState.UP:
                reasons.append(f"{view.name} is {view.state.value}" + (f": {view.last_error}" if view.last_error else ""))
            elif not view.enabled or view.draining:
                reasons.append(f"{view.name} is {'disabled' if not view.enabled else 'draining'}")
        serving = any(view.usable for view in snap.engines) and conductor.accepting
        status = "ok" if not reasons and serving else "degraded" if serving else "down"
        if not conductor.accepting:
            reasons.append("shutting down")
        return JSONResponse({"status": status, "reasons": reasons, "engines": engines, "version": __version__},
                            status_code=200 if serving else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        """The conductor's own Prometheus metrics (syshax_*)."""
        snap = conductor.live_snapshot()
        for view in snap.engines:
            for state in EngineState:
                conductor.counters.m_engine_state.labels(view.name, state.value).set(
                    1.0 if view.state is state else 0.0)
        conductor.stats_model()  # refreshes the in-flight gauges
        return Response(conductor.counters.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
