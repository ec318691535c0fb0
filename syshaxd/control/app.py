"""The control API served on the Unix socket: state, live events and runtime configuration.

Resources (JSON; errors are ``{"error": ..., "key": ...}``):

- ``GET /v1/state`` -- :class:`~syshaxd.schema.StateModel`.
- ``GET /v1/requests?limit=N`` -- the last finished requests
  (:class:`~syshaxd.schema.RequestRecordModel`), oldest first: decision, inputs, outcome.
- ``POST /v1/advice``, ``GET /v1/advice`` -- the latest advice of ``syshax advise``
  (:class:`~syshaxd.schema.AdviceModel`), kept for the console.
- ``GET /v1/events`` -- Server-Sent Events: ``state`` a few times a second, ``decision`` per
  routed request, ``config`` on every change, ``dropped`` when this reader fell behind.
- ``PATCH /v1/config`` -- a flat object of dotted keys, all or nothing; 422 names the key.
- ``POST /v1/config/save`` -- write the runtime values and engine flags to the overrides file.
- ``POST /v1/reload`` -- reread the config files (as SIGHUP does).
- ``POST /v1/drain`` -- drain the whole box and stop, as SIGTERM does (``syshax drain``).

Reading needs membership in ``control.group``; changing needs root, the daemon's user or
``control.admin_group`` (403 says why).

The routes live with their concern: :mod:`~syshaxd.control.watch` (state and events) and
:mod:`~syshaxd.control.configure` (changes); this module puts them together with the error
shape. The daemon builds one :class:`ControlContext`, calls :func:`publish_config_changes`
and runs :func:`publish_states` once, and may build an app from the context any number of
times (once per control socket).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from syshaxd import __version__
from syshaxd.control.configure import MAX_BODY_BYTES, config_router
from syshaxd.control.context import ControlContext, ControlError
from syshaxd.control.watch import (
    KEEPALIVE_INTERVAL,
    STATE_INTERVAL,
    publish_config_changes,
    publish_states,
    watch_router,
)
from syshaxd.schema import ErrorModel

__all__ = [
    "KEEPALIVE_INTERVAL", "MAX_BODY_BYTES", "STATE_INTERVAL", "ControlContext", "ControlError",
    "create_control_app", "publish_config_changes", "publish_states",
]  # fmt: skip


def create_control_app(ctx: ControlContext) -> FastAPI:
    """The control API's FastAPI application; it subscribes to nothing, so build it as often as needed."""
    app = FastAPI(title="syshaxd control", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    install_error_handlers(app)
    app.include_router(watch_router(ctx))
    app.include_router(config_router(ctx))
    return app


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error, ours and the framework's, as ``{"error": ..., "key": ...}``."""

    @app.exception_handler(ControlError)
    async def _control_error(_: Request, exc: ControlError) -> JSONResponse:
        return JSONResponse(ErrorModel(error=exc.message, key=exc.key).model_dump(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(ErrorModel(error=str(exc.detail)).model_dump(), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(ErrorModel(error=f"invalid request: {exc.errors()[0]['msg']}").model_dump(), status_code=422)
