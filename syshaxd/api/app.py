"""The OpenAI-compatible HTTP API on the conductor's TCP port, plus /health and /metrics."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from syshaxd import __version__
from syshaxd.api.completions import CompletionRoutes, openapi_paths
from syshaxd.conductor.conductor import Conductor
from syshaxd.config import Config
from syshaxd.errors import ApiError, error_body
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
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

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

    # The completion routes are plain ASGI inside the guard (the hot path; see apiroutes).
    app.add_middleware(CompletionRoutes, conductor=conductor, config=config)
    app.add_middleware(GuardMiddleware, api_key=api_key)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema["paths"] = {**openapi_paths(_CHAT_SCHEMA, _COMPLETION_SCHEMA), **schema.get("paths", {})}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

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
