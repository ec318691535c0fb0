"""A streamed answer: the SSE body, one chunk per generated token, in the engine's dialect.

llama-server sends one chunk per token (a chat stream skips a token whose text is held
back while a stop string may be forming), and so does vLLM by default. A host that runs
behind may deliver several tokens at once; each still gets its own chunk (several chunks
may then leave in one write), because whoever relays a stream counts its chunks as
tokens (syshaxd does). A client that goes away aborts the request at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sim.api_format import SSE_DONE, ChunkWriter
from sim.api_request import GenSpec
from sim.engine import SimEngine
from sim.generation import Plan, after_finish, llama_timings
from sim.llama_format import LlamaChunkWriter
from sim.realtime import Handle, TokenEvent
from sim.stops import StreamText
from sim.token_stream import relay


def _writer(engine: SimEngine, spec: GenSpec, plan: Plan) -> ChunkWriter:
    created = int(time.time())
    if engine.dialect == "llamacpp":
        return LlamaChunkWriter(spec.kind, plan.response_id, created, spec.model, spec.role,
                                plan.sim.context_tokens, spec.include_usage, plan.sim.kv_ready_tokens)
    writer = ChunkWriter(spec.kind, plan.response_id, created, spec.model, spec.role,
                         plan.sim.context_tokens, spec.include_usage, spec.continuous_usage)
    writer.stop_reason = plan.stop_word
    return writer


class _Chunks:
    """The SSE chunks of one streamed answer, event by event."""

    def __init__(self, engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle, done: bool = True) -> None:
        self.engine, self.spec, self.plan, self.handle = engine, spec, plan, handle
        self.done = done  # end with [DONE] (false: the truncation fault)
        self.writer = _writer(engine, spec, plan)
        self.text = StreamText(plan.text_key, plan.offset, spec.stop, plan.stop.cut if plan.stop else None,
                               llama=engine.dialect == "llamacpp")
        self.generated = 0
        self.started = False
        self.finished = False

    def of(self, event: TokenEvent) -> list[bytes]:
        """The chunks of one event: the role chunk first, then one per token, the tail with the last."""
        out = []
        if not self.started:
            self.started = True
            role = self.writer.first()
            if role is not None:
                out.append(role)
        reason = event.finish_reason
        if reason is not None:
            self.finished = True
            self.engine.live.forget(self.plan.core_rid)
            after_finish(self.engine, self.spec, self.plan, self.generated + event.tokens, reason)
            if isinstance(self.writer, LlamaChunkWriter):
                self.writer.timings = llama_timings(self.handle, self.generated + event.tokens)
        for i in range(event.tokens):
            last = reason if i == event.tokens - 1 else None
            out.append(self.writer.content(self.text.next(last), 1, last))
        if not event.tokens and reason is not None:
            out.append(self.writer.content("", 0, reason))
        self.generated += event.tokens
        if self.finished:
            out += self._tail()
        return out

    def _tail(self) -> list[bytes]:
        """What follows the last token: the usage chunk when asked for, then ``[DONE]`` (unless truncated)."""
        usage = self.writer.final_usage()
        return [c for c in (usage, SSE_DONE if self.done else None) if c is not None]


def stream_answer(engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                  disconnected: Callable[[], asyncio.Future[Any]],
                  early: TokenEvent | None = None) -> AsyncIterator[bytes]:
    """The SSE body of a streamed answer (:func:`sim.token_stream.relay`).

    ``early`` is a first event already taken from the request's queue (see :func:`sim.token_stream.first_event`).
    """
    chunks = _Chunks(engine, spec, plan, handle, done=not engine.faults.take_truncation())
    return relay(engine, plan, handle, disconnected, chunks, early=early)
