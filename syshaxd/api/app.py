"""The OpenAI-compatible HTTP API on the conductor's TCP port: one app, its routes by concern.

- the completion routes, plain ASGI on the hot path (:mod:`syshaxd.api.completions`);
- what the box says about itself: models, health, metrics (:mod:`syshaxd.api.info`);
- the guard in front of all of it (:mod:`syshaxd.api.guard`), and errors rendered once, here,
  as OpenAI error objects.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from syshaxd import __version__
from syshaxd.api import openapi
from syshaxd.api.completions import CompletionRoutes
from syshaxd.api.guard import GuardMiddleware
from syshaxd.api.info import info_router
from syshaxd.conductor import Conductor, Dispatcher
from syshaxd.config import Config
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError, error_body

log = logging.getLogger("syshaxd.api")


def create_api_app(dispatcher: Dispatcher, conductor: Conductor, engines: Sequence[EngineClient],
                   config: Config) -> FastAPI:
    """The conductor's FastAPI app: the dispatcher answers completions, the rest is read-only."""
    app = FastAPI(
        title="syshax",
        version=__version__,
        description="One OpenAI-compatible endpoint in front of a GPU and a CPU inference engine.",
    )
    service = config.services.conductor
    api_key = service.api_key.get_secret_value() if service.api_key else None
    _install_error_handlers(app)
    # The completion routes are plain ASGI inside the guard (the hot path; see completions).
    app.add_middleware(CompletionRoutes, dispatcher=dispatcher, config=config)
    app.add_middleware(GuardMiddleware, api_key=api_key)
    app.include_router(info_router(conductor, engines))
    openapi.install(app)
    return app


def _install_error_handlers(app: FastAPI) -> None:
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
