"""The OpenAI-compatible HTTP API on the conductor's TCP port, its routes by concern.

- the completion routes, on the hot path (:mod:`syshaxd.api.completions`);
- what the box says about itself: models, health, metrics (:mod:`syshaxd.api.info`), served
  by a FastAPI app with the OpenAPI document and the docs pages;
- every other route, passed through to the engines (:mod:`syshaxd.api.passthrough`);
- in front of all of it, the server (:mod:`syshaxd.api.server`) and its guard
  (:mod:`syshaxd.api.guard`); errors are rendered once, as OpenAI error objects.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi import Request as FastAPIRequest
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from starlette.exceptions import HTTPException as StarletteHTTPException

from syshaxd import __version__
from syshaxd.api import openapi
from syshaxd.api.asgi import Request, serve_asgi
from syshaxd.api.completions import completion_routes
from syshaxd.api.guard import Guard
from syshaxd.api.info import info_router
from syshaxd.api.passthrough import Books, forward_route, passthrough_route
from syshaxd.api.response import Response
from syshaxd.api.server import ApiServer, Handler
from syshaxd.conductor import Conductor, Dispatcher, LoadFormat
from syshaxd.config import Config
from syshaxd.engines import ConnectionPool, EngineClient
from syshaxd.errors import ApiError, error_body

log = logging.getLogger("syshaxd.api")


def create_api_server(dispatcher: Dispatcher[Any], conductor: Conductor, config: Config, info: FastAPI) -> ApiServer:
    """The daemon's API port: the dispatcher answers completions, ``info`` (:func:`create_info_app`)
    syshaxd's own routes, the engines every other route they serve."""
    return _api_server(dispatcher, conductor, config, own_paths(info), _asgi_route(info), conductor.registry)


def create_worker_api_server(dispatcher: Dispatcher[Any], books: Books, config: Config, own: Iterable[str],
                             daemon: ConnectionPool) -> ApiServer:
    """A worker process's API port: completions and pass-through as in the daemon, syshaxd's own
    routes (``own``) forwarded to the daemon over ``daemon``, where the books are."""
    return _api_server(dispatcher, books, config, frozenset(own), forward_route(daemon, config.system.request_timeout))


def own_paths(info: FastAPI) -> frozenset[str]:
    """syshaxd's own routes: those of the info app, and its docs pages."""
    own = {path for path in info.openapi()["paths"] if "{" not in path}
    docs = (info.openapi_url, info.docs_url, info.redoc_url, info.swagger_ui_oauth2_redirect_url)
    return frozenset(own | {path for path in docs if path})


def _api_server(dispatcher: Dispatcher[Any], books: Books, config: Config, own: frozenset[str],
                own_handler: Handler, registry: CollectorRegistry | None = None) -> ApiServer:
    service = config.services.conductor
    api_key = service.api_key.get_secret_value() if service.api_key else None
    routes: dict[str, Handler] = completion_routes(dispatcher, config)
    routes.update({path: own_handler for path in own if path not in routes})
    open_paths = frozenset(path for path in own if not path.startswith("/v1/"))  # health, metrics, docs
    passthrough = passthrough_route(books, config.system.request_timeout)
    return ApiServer(routes, Guard(api_key, open_paths), service.max_body_bytes, default=passthrough,
                     limits=service.limits, registry=registry)


def create_info_app(conductor: Conductor, engines: Sequence[EngineClient],
                    load_format: LoadFormat = "vllm-router") -> FastAPI:
    """The FastAPI app of the routes off the token path: models, health, metrics, the docs."""
    app = FastAPI(
        title="syshax",
        version=__version__,
        description="One OpenAI-compatible endpoint in front of a GPU and a CPU inference engine.",
    )
    _install_error_handlers(app)
    app.include_router(info_router(conductor, engines, load_format))
    openapi.install(app)
    return app


def _asgi_route(app: FastAPI) -> Handler:
    def handle(request: Request, response: Response) -> Awaitable[None]:
        return serve_asgi(app, request, response)

    return handle


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: FastAPIRequest, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: FastAPIRequest, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(error_body(message, type=kind, code=str(exc.status_code)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: FastAPIRequest, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal error in syshaxd (logged)", type="internal_error", code="500"),
                            status_code=500)
