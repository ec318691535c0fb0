"""A prefill/decode split: the GPU prefills, the CPU decodes, the client sees one answer.

Two shapes of handoff (:mod:`syshaxd.conductor.handoff`): *merging* protocols (``recompute``,
``syshax``) yield the answer as pieces from both engines, written here as one response with
one id; *prefill-first* protocols (``kv-transfer``, ``llamacpp-slots``) run the prefill and
return a decode request, whose answer passes through the dispatcher's whole path untouched.
A split that fails before the client saw anything becomes a whole request on one engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from syshaxd.conductor.chunks import ChunkWriter, Piece
from syshaxd.conductor.flight import Flight
from syshaxd.conductor.handoff import (
    DecodeRequest,
    MergingHandoff,
    SlotHandoff,
    SplitContext,
    kv_transfer,
    recompute,
    syshax,
)
from syshaxd.conductor.reply import (
    EVENT_STREAM,
    Reply,
    answer_headers,
    send_rejected,
    send_whole,
)
from syshaxd.conductor.tally import StreamCounter, Tally
from syshaxd.engines import EngineClient, EngineFailure, EngineRejected
from syshaxd.errors import ApiError, engine_error_message
from syshaxd.routing import Decision, Handoff

#: The dispatcher's whole path: ``(flight, engine, body, headers, reply, earlier failure)``.
Whole = Callable[[Flight, EngineClient, bytes, dict[str, str], Reply, EngineFailure | None], Awaitable[None]]
CloseLater = Callable[[Any], None]

MERGING: dict[str, MergingHandoff] = {"recompute": recompute.run, "syshax": syshax.run}


class Split:
    """Runs splits with one handoff protocol, falling back to the dispatcher's whole path."""

    def __init__(self, handoff: Handoff, *, whole: Whole, timeout: Callable[[], ApiError]) -> None:
        self.handoff = handoff
        self.slots = SlotHandoff() if handoff == "llamacpp-slots" else None
        self._whole = whole
        self._timeout = timeout

    async def startup_checks(self, gpus: Sequence[EngineClient], cpus: Sequence[EngineClient]) -> None:
        """The protocol's own checks at start (llamacpp-slots: every pair); logged, never raised."""
        if self.slots is not None:
            await self.slots.check_pairs(gpus, cpus)

    async def run(self, flight: Flight, gpu: EngineClient, cpu: EngineClient, decision: Decision, reply: Reply,
                  close_later: CloseLater) -> None:
        """Answer ``flight`` split across ``gpu`` and ``cpu``."""
        ctx = SplitContext(flight=flight, gpu=gpu, cpu=cpu, decision=decision)
        merging = MERGING.get(self.handoff)
        if merging is not None:
            await self._merged(ctx, merging(ctx), reply, close_later)
            return
        prefill = self.slots.prefill if self.slots is not None else kv_transfer.prefill
        try:
            decode: DecodeRequest = await asyncio.wait_for(prefill(ctx), flight.remaining())
        except EngineFailure as failure:
            flight.release(gpu)
            # The prefill side failed before the client saw anything: the CPU does it all.
            flight.rerouted(cpu, f"split failed before decoding ({failure}), whole on {cpu.name}")
            await self._whole(flight, cpu, flight.parsed.raw, {}, reply, failure)
            return
        except EngineRejected as rejected:
            _rejected(flight, reply, rejected)
            return
        except asyncio.TimeoutError:
            raise self._timeout() from None
        try:
            await self._whole(flight, cpu, decode.body, decode.headers, reply, None)
        finally:
            if decode.on_sent is not None:
                decode.on_sent()

    async def _merged(self, ctx: SplitContext, pieces: AsyncIterator[Piece], reply: Reply,
                      close_later: CloseLater) -> None:
        flight, parsed = ctx.flight, ctx.parsed
        try:
            first = await asyncio.wait_for(pieces.__anext__(), flight.remaining())
        except EngineFailure as failure:
            close_later(_aclose(pieces))
            flight.release(ctx.gpu)
            if failure.engine == ctx.cpu.name:
                flight.release(ctx.cpu)
                await self._whole(flight, ctx.gpu, parsed.raw, {}, reply, failure)
                return
            await self._whole(flight, ctx.cpu, parsed.raw, {}, reply, failure)
            return
        except EngineRejected as rejected:
            close_later(_aclose(pieces))
            _rejected(flight, reply, rejected)
            return
        except asyncio.TimeoutError:
            close_later(_aclose(pieces))
            raise self._timeout() from None
        writer = ChunkWriter(parsed.kind == "chat", flight.request_id, parsed.model)
        if parsed.stream:
            reply.start(200, (*EVENT_STREAM, *answer_headers(flight)))
            await _merged_stream(flight, writer, first, pieces, reply, close_later)
            return
        try:
            text, reasoning, finish, prompt, completion = await asyncio.wait_for(
                _collect(first, pieces), flight.remaining())
        except EngineFailure as failure:
            raise ApiError(502, f"split failed: {failure}", type="upstream_error") from None
        except EngineRejected as rejected:
            _rejected(flight, reply, rejected)
            return
        except asyncio.TimeoutError:
            raise self._timeout() from None
        finally:
            close_later(_aclose(pieces))
        body = writer.whole(text, reasoning, finish, prompt, completion)
        send_whole(reply, 200, json.dumps(body, ensure_ascii=False).encode(), flight.request_id,
                   story=answer_headers(flight))
        flight.finish("ok", Tally(completion, "usage", prompt or None, "usage" if prompt else None))


def _rejected(flight: Flight, reply: Reply, rejected: EngineRejected) -> None:
    send_rejected(reply, rejected, flight.request_id)
    flight.finish("rejected")


async def _merged_stream(flight: Flight, writer: ChunkWriter, first: Piece, pieces: AsyncIterator[Piece],
                         reply: Reply, close_later: CloseLater) -> None:
    counter = StreamCounter()  # what the client got, counted as it is written
    async for chunk in _merged_chunks(flight, writer, first, pieces, close_later, counter):
        if reply.gone:
            break
        reply.write(chunk)
        counter.feed(chunk)
        await reply.drain()
    reply.end()


async def _merged_chunks(
    flight: Flight, writer: ChunkWriter, first: Piece, pieces: AsyncIterator[Piece], close_later: CloseLater,
    counter: StreamCounter,
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
    # The chunks written so far are whole events: an error ends the stream inside it (relay.py's rule).
    except EngineFailure as failure:
        outcome = "engine_error"
        yield ApiError(502, f"split failed after the answer started: {failure}", type="upstream_error").event()
    except EngineRejected as rejected:
        outcome = "rejected"
        yield ApiError(rejected.status, f"engine {rejected.engine} refused the continuation: "
                       f"{engine_error_message(rejected.status, rejected.body)}").event()
    except asyncio.TimeoutError:
        outcome = "timeout"
        yield ApiError(504, "request exceeded system.request_timeout", type="timeout").event()
    except (asyncio.CancelledError, GeneratorExit):
        outcome = "client_disconnect"
        raise
    finally:
        close_later(_aclose(pieces))
        # Its own usage chunk is in the counter too; the engines' counts are what it is made of.
        # They cover the whole answer only when it ended well: else the deltas written count.
        counted = counter.tally()
        if outcome == "ok":
            counted = dataclasses.replace(counted, output_tokens=completion, output_source="usage")
        flight.finish(outcome, dataclasses.replace(
            counted, prompt_tokens=first.prompt_tokens or None, prompt_source="usage" if first.prompt_tokens else None))


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
