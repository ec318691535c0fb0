"""Producing the answer: direct pass-through to one engine, or a prefill/decode split.

Failure rules: an engine failing before the client got a byte is resubmitted once to the
other device; after the first byte the stream ends with an OpenAI-style error event.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from syshaxd.conductor.assemble import assemble, streaming_body
from syshaxd.conductor.chunks import ChunkWriter, Piece
from syshaxd.conductor.flight import Flight
from syshaxd.conductor.handoff import DecodeRequest, SplitContext
from syshaxd.engines.client import EngineFailure, EngineRejected, Upstream, describe_http_error
from syshaxd.errors import ApiError, engine_error_message, sse_error
from syshaxd.request import ParsedRequest
from syshaxd.routing import Mode

if TYPE_CHECKING:
    from syshaxd.conductor.conductor import Conductor, Route
    from syshaxd.conductor.handoff.slots import SlotHandoff

#: Dialects always asked to stream: llama-server stops an abandoned non-streamed request
#: only after a second without any other traffic, which a monitored server never has.
STREAM_UPSTREAM = frozenset({"llamacpp"})


@dataclass
class Answer:
    """What the API layer sends back: a whole body, or a stream of SSE bytes."""

    status: int = 200
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Called once the response is over, however it ended (also when the client left
    #: before the stream was ever iterated, when the generator's own cleanup never runs).
    cleanup: Callable[[], None] | None = None


def _merging(protocol: str) -> Callable[[SplitContext], AsyncIterator[Piece]] | None:
    if protocol == "recompute":
        from syshaxd.conductor.handoff import recompute

        return recompute.run
    if protocol == "syshax":
        from syshaxd.conductor.handoff import syshax

        return syshax.run
    return None


class Dispatcher:
    """Runs routed requests against engines for one conductor."""

    def __init__(self, conductor: Conductor) -> None:
        self.c = conductor
        self.slots: SlotHandoff | None = None
        if conductor.handoff == "llamacpp-slots":
            from syshaxd.conductor.handoff.slots import SlotHandoff

            self.slots = SlotHandoff()

    def _prefill_first(self) -> Callable[[SplitContext], Any]:
        from syshaxd.conductor.handoff import kv_transfer

        return self.slots.prefill if self.slots is not None else kv_transfer.prefill

    async def startup_checks(self) -> None:
        """The handoff protocol's own checks at start (llamacpp-slots: every pair); logged, never raised."""
        if self.slots is not None:
            ups = list(self.c.upstreams.values())
            await self.slots.check_pairs([u for u in ups if u.spec.device == "gpu"],
                                         [u for u in ups if u.spec.device == "cpu"])

    async def serve(self, parsed: ParsedRequest, forced_mode: Mode | None = None) -> Answer:
        """Admit, route and answer one request. Streams finish their own accounting."""
        flight = self.c.new_flight(parsed, forced_mode)
        try:
            route = await self.c.admit(flight)
            answer = await self._dispatch(flight, route)
            if answer.stream is None:
                self.c.finish(flight, "ok" if answer.status == 200 else "rejected")
            else:
                answer.cleanup = lambda: self.c.finish(flight, "client_disconnect")
            return answer
        except ApiError as exc:
            self.c.finish(flight, "timeout" if exc.status == 504 else "rejected" if exc.status < 500 else "error")
            raise
        except asyncio.CancelledError:
            self.c.finish(flight, "client_disconnect")
            raise
        except BaseException:
            self.c.finish(flight, "error")
            raise

    async def _dispatch(self, flight: Flight, route: Route) -> Answer:
        parsed = flight.parsed
        if route.decision.mode is Mode.WHOLE or len(route.engines) < 2:
            return await self.whole(flight, route.engines[0], parsed.raw, {})
        gpu, cpu = route.engines
        ctx = SplitContext(
            parsed=parsed, request_id=flight.request_id, gpu=gpu, cpu=cpu, decision=route.decision,
            features=flight.features,
            first_byte=flight.first_byte,
            release=lambda up: self.c.release(flight, up),
            reask=lambda features: self.c.reask(flight, features),
        )
        merging = _merging(self.c.handoff)
        if merging is not None:
            return await self._merged(flight, ctx, merging(ctx))
        try:
            decode: DecodeRequest = await asyncio.wait_for(self._prefill_first()(ctx), flight.remaining())
        except EngineFailure as failure:
            self.c.release(flight, gpu)
            # The prefill side failed before the client saw anything: the CPU does it all.
            if flight.decision is not None:
                flight.decision = flight.decision.model_copy(update={
                    "mode": "whole", "engine": cpu.name,
                    "reason": f"split failed before decoding ({failure}), whole on {cpu.name}; "
                              f"{flight.decision.reason}"})
            return await self.whole(flight, cpu, parsed.raw, {}, failed=failure)
        except EngineRejected as rejected:
            return self._rejected(rejected)
        except asyncio.TimeoutError:
            raise self._timeout() from None
        try:
            return await self.whole(flight, cpu, decode.body, decode.headers)
        finally:
            if decode.on_sent is not None:
                decode.on_sent()

    @staticmethod
    def _rejected(rejected: EngineRejected) -> Answer:
        """An engine refused the request itself (4xx): the client gets that answer, nothing is retried.

        ``serve`` finishes the flight (releasing both engines) as for any whole answer.
        """
        return Answer(status=rejected.status, body=_openai_error_body(rejected))

    def _timeout(self) -> ApiError:
        return ApiError(504, f"request exceeded system.request_timeout ({self.c.config.system.request_timeout:g} s)",
                        type="timeout")

    # -- one engine, bytes passed through --------------------------------------------

    async def whole(
        self, flight: Flight, up: Upstream, body: bytes, headers: dict[str, str],
        failed: EngineFailure | None = None,
    ) -> Answer:
        """Send the request to one engine; resubmit once to the other device on an early failure."""
        parsed = flight.parsed
        try:
            if parsed.stream:
                response = await asyncio.wait_for(up.open_stream(parsed.path, body, headers), flight.remaining())
                chunks = response.aiter_bytes()
                try:
                    first = await asyncio.wait_for(self._first_chunk(up, chunks), flight.remaining())
                except BaseException:
                    self.c.close_later(response.aclose())
                    raise
                flight.first_byte(up)
                flight.on_finish = lambda: self.c.close_later(response.aclose())
                return Answer(stream=self._relay(flight, up, response, chunks, first))
            if up.spec.dialect in STREAM_UPSTREAM:
                data = await asyncio.wait_for(self._assembled(flight, up, body, headers), flight.remaining())
            else:
                response = await asyncio.wait_for(up.open_stream(parsed.path, body, headers), flight.remaining())
                try:
                    data = await asyncio.wait_for(response.aread(), flight.remaining())
                except httpx.HTTPError as exc:
                    raise EngineFailure(up.name, describe_http_error(exc)) from None
                finally:
                    self.c.close_later(response.aclose())
                _check_json_answer(up, data)
            flight.first_byte(up)
            self.c.release(flight, up)
            return Answer(body=data)
        except EngineFailure as failure:
            self.c.release(flight, up)
            other = self.c.resubmit_target(flight, up)
            if other is not None:
                return await self.whole(flight, other, parsed.raw, {}, failed=failure)
            raise _engine_error(failure, failed) from None
        except EngineRejected as rejected:
            self.c.release(flight, up)
            return Answer(status=rejected.status, body=_openai_error_body(rejected))
        except asyncio.TimeoutError:
            self.c.release(flight, up)
            raise self._timeout() from None

    async def _assembled(self, flight: Flight, up: Upstream, body: bytes, headers: dict[str, str]) -> bytes:
        """Stream from the engine and build the non-streamed answer (see :mod:`syshaxd.conductor.assemble`)."""
        response = await up.open_stream(flight.parsed.path, streaming_body(body), headers)
        try:
            flight.first_byte(up)  # this engine sends its headers with the first token
            return await assemble(response, up.name, flight.parsed.kind == "chat")
        finally:
            self.c.close_later(response.aclose())  # also on a client disconnect: stops the engine

    @staticmethod
    async def _first_chunk(up: Upstream, chunks: AsyncIterator[bytes]) -> bytes:
        try:
            first = await chunks.__anext__()
        except StopAsyncIteration:
            raise EngineFailure(up.name, "engine ended the stream before sending anything") from None
        except httpx.HTTPError as exc:
            raise EngineFailure(up.name, describe_http_error(exc)) from None
        head = first.lstrip()
        if not (head.startswith(b"data:") or head.startswith(b":")):
            raise EngineFailure(up.name, "engine stream is not Server-Sent Events")
        if head.startswith(b'data: {"error"') or head.startswith(b'data:{"error"'):
            payload = head.split(b"\n", 1)[0][5:]
            raise EngineFailure(up.name, engine_error_message(200, payload.strip()))
        return first

    async def _relay(
        self, flight: Flight, up: Upstream, response: httpx.Response, chunks: AsyncIterator[bytes], first: bytes
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()

        def expire() -> None:
            flight.expired = True
            self.c.close_later(response.aclose())

        timer = loop.call_later(flight.remaining(), expire)
        outcome, events = "error", first.count(b"data:")
        tail = first[-64:]
        try:
            yield first
            async for chunk in chunks:
                up.answered_at = time.monotonic()
                events += chunk.count(b"data:")
                tail = (tail + chunk)[-64:]
                yield chunk
            if b"data: [DONE]" in tail:
                outcome = "ok"
            else:
                outcome = "truncated"
                yield sse_error(f"engine {up.name} ended the stream without [DONE]; the answer is incomplete")
        except (httpx.HTTPError, httpx.StreamError) as exc:
            if b"data: [DONE]" in tail:
                # The answer was complete; only the connection's end was lost (engine died
                # right after [DONE]). Nothing may follow [DONE].
                outcome = "ok"
            elif flight.expired:
                outcome = "timeout"
                yield sse_error(f"request exceeded system.request_timeout "
                                f"({self.c.config.system.request_timeout:g} s)", type="timeout", code="504")
            else:
                outcome = "engine_error"
                yield sse_error(f"engine {up.name} failed mid-stream: {describe_http_error(exc)}"
                                if isinstance(exc, httpx.HTTPError) else f"engine {up.name} stream closed")
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "client_disconnect"
            raise
        finally:
            timer.cancel()
            self.c.close_later(response.aclose())  # closing the connection aborts the engine's request
            self.c.finish(flight, outcome, tokens=max(0, events - 2))

    # -- a split: two engines, one answer --------------------------------------------

    async def _merged(self, flight: Flight, ctx: SplitContext, pieces: AsyncIterator[Piece]) -> Answer:
        parsed = flight.parsed
        try:
            first = await asyncio.wait_for(pieces.__anext__(), flight.remaining())
        except EngineFailure as failure:
            self.c.close_later(_aclose(pieces))
            self.c.release(flight, ctx.gpu)
            if failure.engine == ctx.cpu.name:
                self.c.release(flight, ctx.cpu)
                return await self.whole(flight, ctx.gpu, parsed.raw, {}, failed=failure)
            return await self.whole(flight, ctx.cpu, parsed.raw, {}, failed=failure)
        except EngineRejected as rejected:
            self.c.close_later(_aclose(pieces))
            return self._rejected(rejected)
        except asyncio.TimeoutError:
            self.c.close_later(_aclose(pieces))
            raise self._timeout() from None
        writer = ChunkWriter(parsed.kind == "chat", flight.request_id, parsed.model)
        if parsed.stream:
            return Answer(stream=self._merged_stream(flight, writer, first, pieces))
        try:
            text, reasoning, finish, prompt, completion = await asyncio.wait_for(
                _collect(first, pieces), flight.remaining())
        except EngineFailure as failure:
            raise ApiError(502, f"split failed: {failure}", type="upstream_error") from None
        except EngineRejected as rejected:
            return self._rejected(rejected)
        except asyncio.TimeoutError:
            raise self._timeout() from None
        finally:
            self.c.close_later(_aclose(pieces))
        body = writer.whole(text, reasoning, finish, prompt, completion)
        return Answer(body=json.dumps(body, ensure_ascii=False).encode())

    async def _merged_stream(
        self, flight: Flight, writer: ChunkWriter, first: Piece, pieces: AsyncIterator[Piece]
    ) -> AsyncIterator[bytes]:
        outcome = "error"
        prompt = first.prompt_tokens or flight.features.prompt_tokens
        completion = first.completion_tokens or 0
        finish = first.finish_reason
        try:
            yield writer.role() + (writer.delta(first.text, first.reasoning) if first.text or first.reasoning else b"")
            async for piece in _bounded(pieces, flight):
                if piece.text or piece.reasoning:
                    yield writer.delta(piece.text, piece.reasoning)
                if piece.completion_tokens is not None:
                    completion += piece.completion_tokens
                finish = piece.finish_reason or finish
            yield writer.finish(finish or "stop")
            if flight.parsed.include_usage:
                yield writer.usage(prompt, completion)
            yield writer.done()
            outcome = "ok"
        except EngineFailure as failure:
            outcome = "engine_error"
            yield sse_error(f"split failed after the answer started: {failure}")
        except EngineRejected as rejected:
            outcome = "rejected"
            yield sse_error(f"engine {rejected.engine} refused the continuation: "
                            f"{engine_error_message(rejected.status, rejected.body)}",
                            type="invalid_request_error", code=str(rejected.status))
        except asyncio.TimeoutError:
            outcome = "timeout"
            yield sse_error("request exceeded system.request_timeout", type="timeout", code="504")
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "client_disconnect"
            raise
        finally:
            self.c.close_later(_aclose(pieces))
            self.c.finish(flight, outcome, tokens=completion)


async def _bounded(pieces: AsyncIterator[Piece], flight: Flight) -> AsyncIterator[Piece]:
    while True:
        try:
            piece = await asyncio.wait_for(pieces.__anext__(), flight.remaining())
        except StopAsyncIteration:
            return
        yield piece


async def _collect(first: Piece, pieces: AsyncIterator[Piece]) -> tuple[str, str, str, int, int]:
    text, reasoning = [first.text], [first.reasoning]
    prompt = first.prompt_tokens or 0
    completion = first.completion_tokens or 0
    finish = first.finish_reason
    async for piece in pieces:
        text.append(piece.text)
        reasoning.append(piece.reasoning)
        if piece.completion_tokens is not None:
            completion += piece.completion_tokens
        finish = piece.finish_reason or finish
    return "".join(text), "".join(reasoning), finish or "stop", prompt, completion


async def _aclose(pieces: AsyncIterator[Piece]) -> None:
    close = getattr(pieces, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # the generator's own cleanup failing must not escape a cleanup task
            pass


def _check_json_answer(up: Upstream, data: bytes) -> None:
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


def _openai_error_body(rejected: EngineRejected) -> bytes:
    """The engine's 4xx answer, reshaped to OpenAI's error object when it is not already."""
    try:
        data = json.loads(rejected.body)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            return rejected.body
    except (ValueError, UnicodeDecodeError):
        pass
    from syshaxd.errors import error_body

    message = engine_error_message(rejected.status, rejected.body)
    kind = "not_found_error" if rejected.status == 404 else "invalid_request_error"
    return json.dumps(error_body(message, type=kind, code=str(rejected.status))).encode()
