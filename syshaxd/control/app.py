"""The control API served on the Unix socket: state, live events and runtime configuration.

Resources (JSON; errors are ``{"error": ..., "key": ...}``):

- ``GET /v1/state`` -- :class:`~syshaxd.schema.StateModel`.
- ``GET /v1/events`` -- Server-Sent Events: ``state`` a few times a second, ``decision`` per
  routed request, ``config`` on every change, ``dropped`` when this reader fell behind.
- ``PATCH /v1/config`` -- a flat object of dotted keys, all or nothing; 422 names the key.
- ``POST /v1/config/save`` -- write the runtime values to the overrides file.
- ``POST /v1/reload`` -- reread the config files (as SIGHUP does).

Reading needs membership in ``control.group``; changing needs root, the daemon's user or
``control.admin_group`` (403 says why).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from syshaxd import __version__
from syshaxd.config import ConfigError
from syshaxd.config.runtime import PatchError, RuntimeConfig
from syshaxd.control.bus import EventBus
from syshaxd.control.peercred import PEER_SCOPE_KEY, AccessPolicy, PeerCred
from syshaxd.schema import ConfigChangeModel, ErrorModel, StateModel

log = logging.getLogger("syshaxd.control")

#: Seconds between ``state`` events on the stream.
STATE_INTERVAL = 0.25
#: An idle stream sends a comment this often so proxies and clients see it alive.
KEEPALIVE_INTERVAL = 15.0
#: Largest PATCH body accepted; a patch of every runtime key is well under 2 KiB.
MAX_BODY_BYTES = 1024 * 1024


@dataclass
class ControlContext:
    """What the control API needs from the daemon (constructed there, passed in)."""

    runtime: RuntimeConfig
    bus: EventBus
    access: AccessPolicy
    state: Callable[[], StateModel]
    reload: Callable[[], Awaitable[ConfigChangeModel]]
    events_queue_size: int = 256


class ControlError(Exception):
    """An error answer with a status code, a message and maybe the offending key."""

    def __init__(self, status: int, message: str, key: str | None = None) -> None:
        self.status = status
        self.message = message
        self.key = key
        super().__init__(message)


def _peer(request: Request) -> PeerCred | None:
    peer = request.scope.get(PEER_SCOPE_KEY)
    return peer if isinstance(peer, PeerCred) else None


def create_control_app(ctx: ControlContext) -> FastAPI:
    """The control API's FastAPI application."""
    app = FastAPI(title="syshaxd control", version=__version__, docs_url=None, redoc_url=None, openapi_url=None)
    ctx.runtime.on_change(lambda change: ctx.bus.publish("config", change))

    def reader(request: Request) -> PeerCred | None:
        peer = _peer(request)
        reason = ctx.access.read_denied(peer)
        if reason:
            raise ControlError(403, reason)
        return peer

    def writer(request: Request) -> PeerCred | None:
        peer = _peer(request)
        reason = ctx.access.write_denied(peer)
        if reason:
            raise ControlError(403, reason)
        return peer

    can_read = [Depends(reader)]
    can_write = [Depends(writer)]

    @app.exception_handler(ControlError)
    async def _control_error(_: Request, exc: ControlError) -> JSONResponse:
        return JSONResponse(ErrorModel(error=exc.message, key=exc.key).model_dump(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(ErrorModel(error=str(exc.detail)).model_dump(), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(ErrorModel(error=f"invalid request: {exc.errors()[0]['msg']}").model_dump(), status_code=422)

    @app.get("/v1/state", response_model=StateModel, dependencies=can_read)
    async def get_state() -> StateModel:
        return ctx.state()

    @app.get("/v1/events", dependencies=can_read)
    async def get_events(request: Request) -> StreamingResponse:
        subscription = ctx.bus.subscribe(maxsize=ctx.events_queue_size)
        first = ctx.state()

        async def stream() -> AsyncIterator[str]:
            try:
                yield f"retry: 1000\nevent: state\ndata: {first.model_dump_json()}\n\n"
                events = subscription.__aiter__()
                while True:
                    try:
                        event = await asyncio.wait_for(events.__anext__(), KEEPALIVE_INTERVAL)
                    except asyncio.TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    except StopAsyncIteration:
                        return  # the daemon is shutting down
                    yield event.sse()
            finally:
                subscription.close()

        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    @app.patch("/v1/config", response_model=ConfigChangeModel, dependencies=can_write)
    async def patch_config(request: Request) -> ConfigChangeModel:
        body = await _json_body(request)
        try:
            change = ctx.runtime.apply_patch(body)
        except PatchError as exc:
            raise ControlError(422, exc.reason, exc.key) from None
        log.info("runtime config changed by %s: %s %s", _who(request), change.changed, change.engines)
        return change

    @app.post("/v1/config/save", response_model=ConfigChangeModel, dependencies=can_write)
    async def save_config(request: Request) -> ConfigChangeModel:
        path = ctx.runtime.overrides_path
        try:
            # Inline rather than in a thread: save() announces the change on the bus,
            # which belongs to the event loop; the file is a few hundred bytes.
            path = ctx.runtime.save()
        except ConfigError as exc:
            raise ControlError(422, f"cannot save: {exc}", exc.key) from None
        except OSError as exc:
            raise ControlError(500, f"cannot write {path}: {exc.strerror or exc}") from None
        log.info("runtime config saved to %s by %s", path, _who(request))
        return ConfigChangeModel(changed=ctx.runtime.last_saved, source="save", path=str(path))

    @app.post("/v1/reload", response_model=ConfigChangeModel, dependencies=can_write)
    async def reload(request: Request) -> ConfigChangeModel:
        try:
            return await ctx.reload()
        except ConfigError as exc:
            raise ControlError(422, f"reload failed, the running config is unchanged: {exc}", exc.key) from None

    return app


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await _read_limited(request, MAX_BODY_BYTES)
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ControlError(422, f"the body is not valid JSON: {exc}", "(body)") from None
    except RecursionError:
        raise ControlError(422, "the body is not valid here: JSON nested too deeply", "(body)") from None
    if not isinstance(body, dict):
        raise ControlError(
            422, 'expected a JSON object of dotted keys, e.g. {"decider.cpu_max_batch_size": 24}', "(body)"
        )
    return body


async def _read_limited(request: Request, limit: int) -> bytes:
    """The body, or 413 as soon as it passes ``limit`` bytes (a patch is a few hundred)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ControlError(413, f"the body is {declared} bytes; the control API takes at most {limit}", "(body)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ControlError(413, f"the body is over {limit} bytes, the most the control API takes", "(body)")
        chunks.append(chunk)
    return b"".join(chunks)


def _who(request: Request) -> str:
    peer = _peer(request)
    return peer.describe() if peer else "unknown peer"


async def publish_states(ctx: ControlContext, stop: asyncio.Event, interval: float = STATE_INTERVAL) -> None:
    """Publish a ``state`` event every ``interval`` seconds while anyone listens, until ``stop``."""
    while not stop.is_set():
        if ctx.bus.subscriber_count:
            try:
                ctx.bus.publish("state", ctx.state())
            except Exception:  # a bad snapshot must not end the stream for good
                log.exception("building the state for the event stream failed")
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass
