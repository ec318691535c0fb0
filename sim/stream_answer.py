"""A streamed answer: the SSE body, one chunk per generated token, in the engine's dialect.

llama-server sends one chunk per token (a chat stream skips a token whose text is held
back while a stop string may be forming), and so does vLLM by default. A host that runs
behind may deliver several tokens at once; each still gets its own chunk (several chunks
may then leave in one write), because whoever relays a stream counts its chunks as
tokens (syshaxd does). A client that goes away aborts the request at once.

Several choices (``n`` > 1) are interleaved as their tokens come, each chunk carrying one
choice and its ``index``. vLLM opens a chat stream with the role chunk of every choice and
ends it with one usage chunk for all of them (the prompt once, every choice's tokens);
llama-server opens each choice when its first token comes and reports each apart: a
completion's last chunk of a choice carries that choice's usage, and a chat asked for usage
gets a usage chunk after each choice's last. ``[DONE]`` follows the last choice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from sim.api_format import SSE_DONE, ChunkWriter
from sim.api_request import GenSpec
from sim.engine import SimEngine
from sim.generation import Plan, after_finish, llama_timings
from sim.llama_format import LlamaChunkWriter
from sim.realtime import Handle, TokenEvent
from sim.stops import StreamText
from sim.token_stream import relay


def _writer(engine: SimEngine, spec: GenSpec, plan: Plan, index: int) -> ChunkWriter:
    created = int(time.time())
    writer: ChunkWriter
    if engine.dialect == "llamacpp":
        writer = LlamaChunkWriter(spec.kind, plan.response_id, created, spec.model, spec.role,
                                  plan.sim.context_tokens, spec.include_usage, plan.sim.kv_ready_tokens)
    else:
        writer = ChunkWriter(spec.kind, plan.response_id, created, spec.model, spec.role,
                             plan.sim.context_tokens, spec.include_usage, spec.continuous_usage)
        writer.stop_reason = plan.stop_word
    writer.index = index
    return writer


class _Choice:
    """One choice's part of a stream: its plan, writer and text so far."""

    def __init__(self, engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle) -> None:
        self.plan, self.handle = plan, handle
        self.writer = _writer(engine, spec, plan, handle.choice)
        self.text = StreamText(plan.text_key, plan.offset, spec.stop, plan.stop.cut if plan.stop else None,
                               llama=engine.dialect == "llamacpp")
        self.generated = 0
        self.started = False
        self.finished = False


class _Chunks:
    """The SSE chunks of one streamed answer (of all its choices), event by event."""

    def __init__(self, engine: SimEngine, spec: GenSpec, choices: Sequence[tuple[Plan, Handle]],
                 done: bool = True) -> None:
        self.engine, self.spec = engine, spec
        self.done = done  # end with [DONE] (false: the truncation fault)
        self.choices = [_Choice(engine, spec, plan, handle) for plan, handle in choices]
        self.llama = engine.dialect == "llamacpp"
        self.started = False
        self.finished = False

    def of(self, event: TokenEvent) -> list[bytes]:
        """The chunks of one event: role chunks first, then one per token, the tail with the last."""
        out = []
        choice = self.choices[event.choice]
        if not self.started:
            self.started = True
            # vLLM opens every choice at once; llama-server each when its first token comes
            for other in self.choices if not self.llama else ():
                out += self._open(other)
        out += self._open(choice)
        reason = event.finish_reason
        if reason is not None:
            choice.finished = True
            self.engine.live.forget(choice.plan.core_rid)
            after_finish(self.engine, self.spec, choice.plan, choice.generated + event.tokens, reason)
            if isinstance(choice.writer, LlamaChunkWriter):
                choice.writer.timings = llama_timings(choice.handle, choice.generated + event.tokens)
        for i in range(event.tokens):
            last = reason if i == event.tokens - 1 else None
            out.append(choice.writer.content(choice.text.next(last), 1, last))
        if not event.tokens and reason is not None:
            out.append(choice.writer.content("", 0, reason))
        choice.generated += event.tokens
        if choice.finished and self.llama and len(self.choices) > 1:
            out += [c for c in (choice.writer.final_usage(),) if c is not None]
        if all(c.finished for c in self.choices):
            self.finished = True
            out += self._tail()
        return out

    @staticmethod
    def _open(choice: _Choice) -> list[bytes]:
        if choice.started:
            return []
        choice.started = True
        role = choice.writer.first()
        return [role] if role is not None else []

    def _tail(self) -> list[bytes]:
        """What follows the last token: the usage chunk when asked for, then ``[DONE]`` (unless truncated)."""
        if self.llama and len(self.choices) > 1:
            usage = None  # sent after each choice's last chunk
        else:
            usage = self.choices[0].writer.final_usage(sum(c.writer.completion_tokens for c in self.choices))
        return [c for c in (usage, SSE_DONE if self.done else None) if c is not None]


def stream_answer(engine: SimEngine, spec: GenSpec, choices: Sequence[tuple[Plan, Handle]],
                  disconnected: Callable[[], asyncio.Future[Any]],
                  early: TokenEvent | None = None) -> AsyncIterator[bytes]:
    """The SSE body of a streamed answer of one or more choices (:func:`sim.token_stream.relay`).

    ``early`` is a first event already taken from the request's queue (see :func:`sim.token_stream.first_event`).
    """
    chunks = _Chunks(engine, spec, choices, done=not engine.faults.take_truncation())
    (plan, handle), *others = choices
    return relay(engine, plan, handle, disconnected, chunks, early=early, others=[p for p, _ in others])
