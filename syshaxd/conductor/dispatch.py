"""Producing the answer: direct pass-through to one engine, or a prefill/decode split.

The service builds one :class:`Dispatcher` and hands it to the API routes. Per request it
asks the conductor for a flight and a route, then talks only to the flight. Failure rules:
an engine failing before the client got a byte is resubmitted once to the other device;
after the first byte the stream ends with an OpenAI-style error event. A request the core
takes back before its first byte (:mod:`syshaxd.core.revoke`) has its engine's answer
stopped and its client answered with the core's 429.

The common case costs no task and no trip round the event loop: when the conductor has
capacity and the engine an idle connection, :meth:`Dispatcher.start` sends the request from
the caller's own callback and the relay answers from the engine connection's. Everything
else -- waiting for capacity, a new connection, a failure to recover from, a split -- runs
as a coroutine the caller awaits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine, Sequence
from typing import Any, Generic, Protocol, TypeVar

from syshaxd.conductor.answers import (
    BodyRelay,
    CompletionRelay,
    StreamRelay,
    asks_usage,
    with_usage,
)
from syshaxd.conductor.assemble import assemble, streaming_body
from syshaxd.conductor.conductor import Route
from syshaxd.conductor.flight import Flight
from syshaxd.conductor.reply import (
    Reply,
    answer_headers,
    outcome_of,
    send_error,
    send_rejected,
    send_whole,
)
from syshaxd.conductor.split import Split
from syshaxd.conductor.tally import StreamCounter
from syshaxd.engines import EngineClient, EngineFailure, EngineRejected
from syshaxd.errors import ApiError
from syshaxd.request import ParsedRequest, dump_body
from syshaxd.routing import Handoff, Mode

log = logging.getLogger("syshaxd.conductor")

#: Dialects always asked to stream: llama-server stops an abandoned non-streamed request
#: only after a second without any other traffic, which a monitored server never has.
STREAM_UPSTREAM = frozenset({"llamacpp"})


F = TypeVar("F", bound=Flight)


class Admission(Protocol[F]):
    """Where flights come from and are let in: the :class:`~syshaxd.conductor.Conductor` in the
    daemon, a :class:`~syshaxd.conductor.remote.RemoteConductor` in a worker process."""

    request_timeout: float

    def new_flight(self, parsed: ParsedRequest, forced_mode: Mode | None = None,
                   request_id: str | None = None) -> F:
        """Start accounting for a request."""
        ...

    def try_admit(self, flight: F) -> Route | None:
        """A route now, or None: wait with :meth:`admit`."""
        ...

    async def admit(self, flight: F) -> Route:
        """Wait for a route."""
        ...


class Dispatcher(Generic[F]):
    """Runs routed requests against engines."""

    def __init__(self, conductor: Admission[F], engines: Sequence[EngineClient], handoff: Handoff) -> None:
        self.conductor = conductor
        self.engines = tuple(engines)
        self.split = Split(handoff, whole=self.whole, timeout=self._timeout)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the daemon's one loop, looked up once

    async def startup_checks(self) -> None:
        """The handoff protocol's own checks at start (llamacpp-slots: every pair); logged, never raised."""
        await self.split.startup_checks([e for e in self.engines if e.device == "gpu"],
                                        [e for e in self.engines if e.device == "cpu"])

    def start(self, parsed: ParsedRequest, reply: Reply, forced_mode: Mode | None = None,
              request_id: str | None = None) -> Coroutine[Any, Any, None] | None:
        """Admit, route and answer one request on ``reply``.

        Returns None when the answer is already under way (capacity now, an idle connection,
        a whole answer): the engine connection's callbacks finish it. Else the coroutine that
        answers it, for the caller to await.

        Raises:
            ApiError: refused before anything was sent (the caller renders it).
        """
        flight = self.conductor.new_flight(parsed, forced_mode, request_id)
        try:
            route = self.conductor.try_admit(flight)
        except ApiError as exc:
            flight.finish(outcome_of(exc))
            raise
        if route is not None:
            placed(flight, route)
            if (route.decision.mode is Mode.WHOLE or len(route.engines) < 2) and \
                    self._start_now(flight, route.engines[0], flight.parsed.raw, {}, reply):
                return None
        return self.serve(flight, reply, route)

    async def serve(self, flight: F, reply: Reply, route: Route | None = None) -> None:
        """Answer ``flight`` (waiting for a route first when it has none)."""
        try:
            if route is None:
                route = await self.conductor.admit(flight)
                placed(flight, route)
            await self._dispatch(flight, route, reply)
        except ApiError as exc:
            flight.finish(outcome_of(exc))
            raise
        except asyncio.CancelledError:
            flight.finish("client_disconnect")
            raise
        except BaseException:
            flight.finish("error")
            raise

    async def _dispatch(self, flight: Flight, route: Route, reply: Reply) -> None:
        if route.decision.mode is Mode.WHOLE or len(route.engines) < 2:
            await self.whole(flight, route.engines[0], flight.parsed.raw, {}, reply)
            return
        gpu, cpu = route.engines
        await self.split.run(flight, gpu, cpu, route.decision, reply, self.close_later)

    def _timeout(self) -> ApiError:
        return ApiError(504, self.timeout_message(), type="timeout")

    def timeout_message(self) -> str:
        """What a client is told when its request ran past ``system.request_timeout``."""
        return f"request exceeded system.request_timeout ({self.conductor.request_timeout:g} s)"

    def close_later(self, coro: Any) -> None:
        """Run a cleanup coroutine without awaiting it (safe inside a cancelled task)."""
        self._spawn(coro)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- one engine, bytes passed through --------------------------------------------

    def _relay(self, flight: Flight, up: EngineClient, reply: Reply) -> CompletionRelay:
        kind = StreamRelay if flight.parsed.stream else BodyRelay
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return kind(self._loop, flight, up, reply, self.timeout_message())

    @staticmethod
    def _request(flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str]) -> bytes:
        if asks_usage(flight, up):  # for the record; the relay keeps it from the client
            body = with_usage(body)
        return up.request_bytes(b"POST", flight.parsed.path, body,
                                {**headers, **flight.trace_headers(), "X-Request-Id": flight.request_id})

    def _start_now(self, flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str], reply: Reply) -> bool:
        """Send on an idle connection from here, when there is one; failures are recovered in a task."""
        if not flight.parsed.stream and up.spec.dialect in STREAM_UPSTREAM:
            return False
        conn = up.pool.take_idle()
        if conn is None:
            return False
        relay = self._relay(flight, up, reply)
        relay.exchange = up.exchange_on(conn, self._request(flight, up, body, headers), relay)
        relay.on_early_failure(lambda exc: self._spawn(self._recover(flight, up, reply, exc)))
        flight.when_revoked(relay.revoke)
        return True

    async def _recover(self, flight: Flight, up: EngineClient, reply: Reply, exc: BaseException) -> None:
        """The fast path's failure before the client had a byte: the same rules as :meth:`whole`."""
        try:
            await self._failed(flight, up, reply, exc, None)
        except ApiError as error:
            flight.finish(outcome_of(error))
            send_error(reply, error, flight.request_id)
        except Exception:
            log.exception("recovering request %s failed", flight.request_id)
            flight.finish("error")
            send_error(reply, ApiError(500, "internal error in syshaxd (logged)", type="internal_error"))

    async def whole(self, flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str], reply: Reply,
                    failed: EngineFailure | None = None) -> None:
        """Send the request to one engine; resubmit once to the other device on an early failure."""
        try:
            if flight.revoked is not None:  # taken back while it was on its way here
                flight.release(up)
                raise flight.revoked
            if not flight.parsed.stream and up.spec.dialect in STREAM_UPSTREAM:
                await self._assembled(flight, up, body, headers, reply)
                return
            relay = self._relay(flight, up, reply)
            flight.when_revoked(relay.revoke)
            try:
                relay.exchange = await up.exchange(self._request(flight, up, body, headers), relay)
            except BaseException:
                relay.cancel()
                raise
            if relay.over:  # stopped while a connection was had (taken back, client gone): the engine must not run it
                relay.exchange.abort()
            await relay.wait_committed()
        except (EngineFailure, EngineRejected, asyncio.TimeoutError) as exc:
            await self._failed(flight, up, reply, exc, failed)

    async def _failed(self, flight: Flight, up: EngineClient, reply: Reply, exc: BaseException,
                      failed: EngineFailure | None) -> None:
        flight.release(up)
        if flight.revoked is not None:  # the core took it back (whatever failed with or after that)
            raise flight.revoked
        if isinstance(exc, EngineRejected):
            send_rejected(reply, exc, flight.request_id)
            flight.finish("rejected")
            return
        if isinstance(exc, EngineFailure):
            other = await flight.resubmit(up)
            if other is not None:
                await self.whole(flight, other, flight.parsed.raw, {}, reply, failed=exc)
                return
            raise _engine_error(exc, failed) from None
        raise self._timeout() from None

    async def _assembled(self, flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str],
                         reply: Reply) -> None:
        """Asked to stream, answered as one body (see :mod:`syshaxd.conductor.assemble`)."""
        headers = {**headers, "X-Request-Id": flight.request_id}
        response = await up.open_stream(flight.parsed.path, streaming_body(body), headers)
        if flight.revoked is not None:  # taken back while the engine prefilled: it stops now
            response.close()
            flight.release(up)
            raise flight.revoked
        counter = StreamCounter(flight.parsed.n)  # the tokens' times as read here: where a streaming client sees them
        try:
            flight.first_byte(up)  # this engine sends its headers with the first token
            data = await asyncio.wait_for(assemble(response, up.name, flight.parsed.kind == "chat", counter),
                                          flight.remaining())
        finally:
            response.close()  # also on a client disconnect: stops the engine
        flight.release(up)
        send_whole(reply, 200, data, flight.request_id, story=answer_headers(flight))
        flight.finish("ok", counter.tally())


def placed(flight: Flight, route: Route) -> None:
    """The route is the flight's: its answer's headers say where it runs and why, and its body
    carries the class's priority when the engines are to get it (``service.forward_priority``)."""
    decision = route.decision
    flight.placed(route.service_class, decision.device, "+".join(e.name for e in route.engines),
                  decision.mode.value, decision.reason)
    if route.priority is not None and route.priority != flight.parsed.body.get("priority"):
        body = {**flight.parsed.body, "priority": route.priority}
        flight.parsed = dataclasses.replace(flight.parsed, body=body, raw=dump_body(body))


def _engine_error(failure: EngineFailure, earlier: EngineFailure | None) -> ApiError:
    message = f"engine {failure.engine} failed: {failure.message}"
    if earlier is not None and earlier is not failure:
        message = f"engine {earlier.engine} failed: {earlier.message}; resubmitted, and {message}"
    return ApiError(502, message, type="upstream_error")
