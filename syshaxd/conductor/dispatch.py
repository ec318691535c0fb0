"""Producing the answer: direct pass-through to one engine, or a prefill/decode split.

The service builds one :class:`Dispatcher` and hands it to the API routes. Per request it
asks the conductor for a flight and a route, then talks only to the flight. Failure rules:
an engine failing before the client got a byte is resubmitted once to the other device;
after the first byte the stream ends with an OpenAI-style error event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from syshaxd.conductor.answer import Answer, rejected_answer
from syshaxd.conductor.assemble import assemble, streaming_body
from syshaxd.conductor.conductor import Conductor, Route
from syshaxd.conductor.flight import Flight
from syshaxd.conductor.split import Split
from syshaxd.engines import EngineClient, EngineFailure, EngineRejected, describe_http_error
from syshaxd.errors import ApiError, engine_error_message, sse_error
from syshaxd.request import ParsedRequest
from syshaxd.routing import Handoff, Mode
from syshaxd.sse import DONE, Decoder, NotEventStream

#: Dialects always asked to stream: llama-server stops an abandoned non-streamed request
#: only after a second without any other traffic, which a monitored server never has.
STREAM_UPSTREAM = frozenset({"llamacpp"})
_DONE_EVENT = b"data: " + DONE


class Dispatcher:
    """Runs routed requests against engines."""

    def __init__(self, conductor: Conductor, engines: Sequence[EngineClient], handoff: Handoff) -> None:
        self.conductor = conductor
        self.engines = tuple(engines)
        self.split = Split(handoff, whole=self.whole, timeout=self._timeout, rejected=rejected_answer)
        self._closing: set[asyncio.Task[Any]] = set()

    async def startup_checks(self) -> None:
        """The handoff protocol's own checks at start (llamacpp-slots: every pair); logged, never raised."""
        await self.split.startup_checks([e for e in self.engines if e.device == "gpu"],
                                        [e for e in self.engines if e.device == "cpu"])

    async def serve(self, parsed: ParsedRequest, forced_mode: Mode | None = None) -> Answer:
        """Admit, route and answer one request. Streams finish their own accounting."""
        flight = self.conductor.new_flight(parsed, forced_mode)
        try:
            route = await self.conductor.admit(flight)
            answer = await self._dispatch(flight, route)
            if answer.stream is None:
                flight.finish("ok" if answer.status == 200 else "rejected")
            else:
                answer.cleanup = lambda: flight.finish("client_disconnect")
            return answer
        except ApiError as exc:
            flight.finish("timeout" if exc.status == 504 else "rejected" if exc.status < 500 else "error")
            raise
        except asyncio.CancelledError:
            flight.finish("client_disconnect")
            raise
        except BaseException:
            flight.finish("error")
            raise

    async def _dispatch(self, flight: Flight, route: Route) -> Answer:
        if route.decision.mode is Mode.WHOLE or len(route.engines) < 2:
            return await self.whole(flight, route.engines[0], flight.parsed.raw, {})
        gpu, cpu = route.engines
        return await self.split.run(flight, gpu, cpu, route.decision, self.close_later)

    def _timeout(self) -> ApiError:
        return ApiError(504, f"request exceeded system.request_timeout ({self.conductor.request_timeout:g} s)",
                        type="timeout")

    def close_later(self, coro: Any) -> None:
        """Run a cleanup coroutine without awaiting it (safe inside a cancelled task)."""
        task = asyncio.ensure_future(coro)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- one engine, bytes passed through --------------------------------------------

    async def whole(
        self, flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str],
        failed: EngineFailure | None = None,
    ) -> Answer:
        """Send the request to one engine; resubmit once to the other device on an early failure."""
        try:
            if flight.parsed.stream:
                return await self._streamed(flight, up, body, headers)
            data = await asyncio.wait_for(self._read_whole(flight, up, body, headers), flight.remaining())
            flight.first_byte(up)
            flight.release(up)
            return Answer(body=data)
        except EngineFailure as failure:
            flight.release(up)
            other = flight.resubmit(up)
            if other is not None:
                return await self.whole(flight, other, flight.parsed.raw, {}, failed=failure)
            raise _engine_error(failure, failed) from None
        except EngineRejected as exc:
            flight.release(up)
            return rejected_answer(exc)
        except asyncio.TimeoutError:
            flight.release(up)
            raise self._timeout() from None

    async def _streamed(self, flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str]) -> Answer:
        response = await asyncio.wait_for(up.open_stream(flight.parsed.path, body, headers), flight.remaining())
        chunks = response.aiter_bytes()
        try:
            first = await asyncio.wait_for(_first_chunk(up, chunks), flight.remaining())
        except BaseException:
            self.close_later(response.aclose())
            raise
        flight.first_byte(up)
        flight.on_finish(lambda: self.close_later(response.aclose()))
        return Answer(stream=self._relay(flight, up, response, chunks, first))

    async def _read_whole(self, flight: Flight, up: EngineClient, body: bytes, headers: dict[str, str]) -> bytes:
        if up.spec.dialect in STREAM_UPSTREAM:
            # Asked to stream, answered as one body (see syshaxd.conductor.assemble).
            response = await up.open_stream(flight.parsed.path, streaming_body(body), headers)
            try:
                flight.first_byte(up)  # this engine sends its headers with the first token
                return await assemble(response, up.name, flight.parsed.kind == "chat")
            finally:
                self.close_later(response.aclose())  # also on a client disconnect: stops the engine
        response = await up.open_stream(flight.parsed.path, body, headers)
        try:
            data = await response.aread()
        except httpx.HTTPError as exc:
            raise EngineFailure(up.name, describe_http_error(exc)) from None
        finally:
            self.close_later(response.aclose())
        _check_json_answer(up, data)
        return data

    async def _relay(
        self, flight: Flight, up: EngineClient, response: httpx.Response, chunks: AsyncIterator[bytes], first: bytes
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()

        def expire() -> None:
            flight.expired = True
            self.close_later(response.aclose())

        timer = loop.call_later(flight.remaining(), expire)
        outcome, events = "error", first.count(b"data:")
        tail = first[-64:]
        try:
            yield first
            async for chunk in chunks:
                flight.answering(up)
                events += chunk.count(b"data:")
                tail = (tail + chunk)[-64:]
                yield chunk
            if _DONE_EVENT in tail:
                outcome = "ok"
            else:
                outcome = "truncated"
                yield sse_error(f"engine {up.name} ended the stream without [DONE]; the answer is incomplete")
        except (httpx.HTTPError, httpx.StreamError) as exc:
            if _DONE_EVENT in tail:
                # The answer was complete; only the connection's end was lost (engine died
                # right after [DONE]). Nothing may follow [DONE].
                outcome = "ok"
            elif flight.expired:
                outcome = "timeout"
                yield sse_error(f"request exceeded system.request_timeout "
                                f"({self.conductor.request_timeout:g} s)", type="timeout", code="504")
            else:
                outcome = "engine_error"
                yield sse_error(f"engine {up.name} failed mid-stream: {describe_http_error(exc)}"
                                if isinstance(exc, httpx.HTTPError) else f"engine {up.name} stream closed")
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "client_disconnect"
            raise
        finally:
            timer.cancel()
            self.close_later(response.aclose())  # closing the connection aborts the engine's request
            flight.finish(outcome, tokens=max(0, events - 2))


async def _first_chunk(up: EngineClient, chunks: AsyncIterator[bytes]) -> bytes:
    """The stream's first bytes, once they are known to be events and not an error event."""
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        raise EngineFailure(up.name, "engine ended the stream before sending anything") from None
    except httpx.HTTPError as exc:
        raise EngineFailure(up.name, describe_http_error(exc)) from None
    try:
        events = Decoder(strict=True).feed(first)
    except NotEventStream:
        raise EngineFailure(up.name, "engine stream is not Server-Sent Events") from None
    for event in events:
        if event.data.startswith(b'{"error"'):
            raise EngineFailure(up.name, engine_error_message(200, event.data))
    return first


def _check_json_answer(up: EngineClient, data: bytes) -> None:
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise EngineFailure(up.name, "engine answered 200 with a body that is not JSON") from None
    if not isinstance(parsed, dict) or ("error" in parsed and "choices" not in parsed):
        raise EngineFailure(up.name, engine_error_message(200, data))


def _engine_error(failure: EngineFailure, earlier: EngineFailure | None) -> ApiError:
    message = f"engine {failure.engine} failed: {failure.message}"
    if earlier is not None and earlier is not failure:
        message = f"engine {earlier.engine} failed: {earlier.message}; resubmitted, and {message}"
    return ApiError(502, message, type="upstream_error")
