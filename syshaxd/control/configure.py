"""Changing the daemon: ``PATCH /v1/config``, ``POST /v1/config/save``, ``POST /v1/reload``,
``POST /v1/drain``.

A patch is a flat JSON object of dotted keys, applied all or nothing; a bad one is a 422
naming the key. Bodies are read with a size limit, so a huge one is refused early (413).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError

from syshaxd.config import ConfigError, PatchError
from syshaxd.control.context import ControlContext, ControlError, may_write, who
from syshaxd.schema import AdviceModel, ConfigChangeModel

log = logging.getLogger("syshaxd.control")

#: Largest PATCH body accepted; a patch of every runtime key is well under 2 KiB.
MAX_BODY_BYTES = 1024 * 1024


def config_router(ctx: ControlContext) -> APIRouter:
    """The routes that change the running daemon, for peers that may write."""
    router = APIRouter(dependencies=may_write(ctx))

    @router.patch("/v1/config", response_model=ConfigChangeModel)
    async def patch_config(request: Request) -> ConfigChangeModel:
        body = await json_body(request)
        try:
            change = ctx.runtime.apply_patch(body)
        except PatchError as exc:
            raise ControlError(422, exc.reason, exc.key) from None
        log.info("runtime config changed by %s: %s %s", who(request), change.changed, change.engines)
        return change

    @router.post("/v1/config/save", response_model=ConfigChangeModel)
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
        log.info("runtime config saved to %s by %s", path, who(request))
        saved = ctx.runtime
        return ConfigChangeModel(changed=saved.last_saved, engines=saved.last_saved_engines, source="save", path=str(path))

    @router.post("/v1/reload", response_model=ConfigChangeModel)
    async def reload() -> ConfigChangeModel:
        try:
            return await ctx.reload()
        except ConfigError as exc:
            raise ControlError(422, f"reload failed, the running config is unchanged: {exc}", exc.key) from None

    @router.post("/v1/advice", response_model=AdviceModel)
    async def post_advice(request: Request) -> AdviceModel:
        """Keep the advice ``syshax advise`` made, for the console (``GET /v1/advice``)."""
        try:
            advice = AdviceModel.model_validate(await json_body(request))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ControlError(422, f"not an advice: {first['msg']}", ".".join(map(str, first["loc"]))) from None
        ctx.advice = advice
        ctx.bus.publish("advice", advice)
        return advice

    @router.post("/v1/drain")
    async def drain(request: Request) -> dict[str, str]:
        """Drain the whole box: /health turns 503, what is in flight finishes, then the daemon exits."""
        if ctx.drain is None:
            raise ControlError(501, "this daemon cannot drain from the control API")
        message = ctx.drain(f"syshax drain by {who(request)}")
        log.info("box drain requested by %s", who(request))
        return {"status": "draining", "message": message}

    return router


async def json_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object, or a 422/413 :class:`ControlError` saying what is wrong."""
    raw = await read_limited(request, MAX_BODY_BYTES)
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


async def read_limited(request: Request, limit: int) -> bytes:
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
