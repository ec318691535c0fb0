"""Watching the daemon: ``GET /v1/state``, the ``GET /v1/events`` stream, and what feeds it.

The stream starts with a ``state`` event and then carries what is published on the bus:
``state`` a few times a second (:func:`publish_states`), ``decision`` per routed request
(the conductor), ``config`` on every change (:func:`publish_config_changes`), ``dropped``
when this reader fell behind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from syshaxd.config import RuntimeConfig
from syshaxd.control.bus import EventBus, Subscription
from syshaxd.control.context import ControlContext, ControlError, may_read
from syshaxd.schema import AdviceModel, RequestRecordModel, StateModel

log = logging.getLogger("syshaxd.control")

#: Seconds between ``state`` events on the stream.
STATE_INTERVAL = 0.25
#: An idle stream sends a comment this often so proxies and clients see it alive.
KEEPALIVE_INTERVAL = 15.0


def watch_router(ctx: ControlContext) -> APIRouter:
    """``GET /v1/state`` and ``GET /v1/events``, for peers that may read."""
    router = APIRouter(dependencies=may_read(ctx))

    @router.get("/v1/state", response_model=StateModel)
    async def get_state() -> StateModel:
        return ctx.state()

    @router.get("/v1/requests", response_model=list[RequestRecordModel])
    async def get_requests(limit: int | None = Query(default=None, ge=0, le=1_000_000)) -> list[RequestRecordModel]:
        """The last finished requests, oldest first: the decision, its inputs and what happened."""
        if ctx.requests is None:
            raise ControlError(501, "this daemon keeps no record of its requests")
        return ctx.requests(limit)

    @router.get("/v1/advice", response_model=AdviceModel)
    async def get_advice() -> AdviceModel:
        """The latest advice ``syshax advise`` left here (404 before any)."""
        if ctx.advice is None:
            raise ControlError(404, "no advice yet: run `syshax advise`")
        return ctx.advice

    @router.get("/v1/events")
    async def get_events() -> StreamingResponse:
        subscription = ctx.bus.subscribe(maxsize=ctx.events_queue_size)  # before the state: no gap
        try:
            first = ctx.state()
        except BaseException:
            subscription.close()  # no stream will ever read it
            raise
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(event_stream(first, subscription), media_type="text/event-stream", headers=headers)

    return router


async def event_stream(first: StateModel, subscription: Subscription) -> AsyncIterator[str]:
    """The SSE text of one stream: ``first``, then the subscription's events, with keepalives.

    Ends when the bus closes (the daemon is shutting down); leaves the bus when it ends.
    """
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


def publish_config_changes(runtime: RuntimeConfig, bus: EventBus) -> Callable[[], None]:
    """Publish every change of ``runtime`` as a ``config`` event on ``bus``.

    Call it once per daemon, not per control app: the daemon builds a new control app each
    time its socket is made again, and each subscription would publish every change once
    more. Returns a function that ends the publishing.
    """
    return runtime.on_change(lambda change: bus.publish("config", change))


async def publish_states(ctx: ControlContext, stop: asyncio.Event, interval: float = STATE_INTERVAL) -> None:
    """Publish a ``state`` event every ``interval`` seconds while anyone listens, until ``stop``.

    With nobody listening it sleeps until someone subscribes (an idle daemon wakes for nothing).
    """
    while not stop.is_set() and not ctx.bus.closed:
        if not ctx.bus.subscriber_count:
            await ctx.bus.listened()
            continue
        try:
            ctx.bus.publish("state", ctx.state())
        except Exception:  # a bad snapshot must not end the stream for good
            log.exception("building the state for the event stream failed")
        await asyncio.sleep(interval)
