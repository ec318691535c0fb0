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
from collections.abc import Awaitable, Sequence

from fastapi import FastAPI
from fastapi import Request as FastAPIRequest
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from syshaxd import __version__
from syshaxd.api import openapi
from syshaxd.api.asgi import Request, serve_asgi
from syshaxd.api.completions import completion_routes
from syshaxd.api.guard import Guard
from syshaxd.api.info import info_router
from syshaxd.api.passthrough import passthrough_route
from syshaxd.api.response import Response
from syshaxd.api.server import ApiServer, Handler
from syshaxd.conductor import Conductor, Dispatcher
from syshaxd.config import Config
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError, error_body

log = logging.getLogger("syshaxd.api")


def create_api_server(dispatcher: Dispatcher, conductor: Conductor, engines: Sequence[EngineClient],
                      config: Config) -> ApiServer:
    """The API port: the dispatcher answers completions, the engines the routes they serve."""
    service = config.services.conductor
    api_key = service.api_key.get_secret_value() if service.api_key else None
    app = create_info_app(conductor, engines)
    routes: dict[str, Handler] = completion_routes(dispatcher, config)
    # syshaxd's own read-only routes (and the docs pages) go to the FastAPI app; the rest that
    # is not a completion route is an engine's.
    own = {path for path in app.openapi()["paths"] if "{" not in path}
    own |= {path for path in (app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url) if path}
    fallback = _asgi_route(app)
    routes.update({path: fallback for path in own if path not in routes})
    passthrough = passthrough_route(conductor, config.system.request_timeout)
    open_paths = frozenset(path for path in own if not path.startswith("/v1/"))  # health, metrics, docs
    return ApiServer(routes, app, Guard(api_key, open_paths), service.max_body_bytes, passthrough=passthrough)


def create_info_app(conductor: Conductor, engines: Sequence[EngineClient]) -> FastAPI:
    """The FastAPI app of the routes off the token path: models, health, metrics, the docs."""
    app = FastAPI(
        title="syshax",
        version=__version__,
        description="One OpenAI-compatible endpoint in front of a GPU and a CPU inference engine.",
    )
    _install_error_handlers(app)
    app.include_router(info_router(conductor, engines))
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
