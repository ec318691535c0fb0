"""A Responses API answer (``POST /v1/responses``): the whole body, or its events token by token.

The request runs on the engine core like a chat completion (it counts against the batch,
its timing is the model's); only the body differs (:mod:`sim.responses_format`). A
stream has one ``response.output_text.delta`` per generated token (llama-server skips a
token whose text is held back by a stop string). vLLM sends ``response.created`` and
``response.in_progress`` at once, llama-server with the first token. A client that goes
away aborts the request; ``die_mid_stream`` ends the process after the 3rd event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sim.api_request import GenSpec
from sim.engine import SimEngine
from sim.full_answer import finished
from sim.generation import Plan, after_finish, llama_timings
from sim.realtime import Handle, TokenEvent
from sim.responses_format import (
    LlamaEvents,
    VllmEvents,
    llama_response,
    llama_usage,
    vllm_output,
    vllm_response,
    vllm_usage,
)
from sim.responses_request import ResponsesParams
from sim.stops import StreamText
from sim.token_stream import relay


async def full_response(engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                        disconnected: Callable[[], asyncio.Future[Any]], params: ResponsesParams | None,
                        created: int) -> dict[str, Any] | None:
    """The whole Responses body (``params`` None: llama-server's); None if the client went away."""
    done = await finished(engine, spec, plan, handle, disconnected)
    if done is None:
        return None
    text = plan.text(done.generated, done.reason)
    if params is None:
        usage = llama_usage(plan.sim.context_tokens, done.generated, plan.sim.kv_ready_tokens)
        return llama_response(plan.response_id, model=spec.model, now=int(time.time()), text=text, usage=usage)
    return vllm_response(params, model=spec.model, created=created, output=vllm_output(text), status="completed",
                         usage=vllm_usage(plan.sim.context_tokens, done.generated, plan.sim.kv_ready_tokens))


def response_events(spec: GenSpec, plan: Plan, params: ResponsesParams | None, created: int) -> VllmEvents | LlamaEvents:
    """The event writer of one streamed answer (``params`` None: llama-server's)."""
    if params is None:
        return LlamaEvents(plan.response_id, spec.model, plan.sim.context_tokens, plan.sim.kv_ready_tokens)
    return VllmEvents(params, spec.model, created, plan.sim.context_tokens)


class _Tokens:
    """The events of a stream's token events, and what the answer has generated so far."""

    def __init__(self, engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                 events: VllmEvents | LlamaEvents) -> None:
        self.engine, self.spec, self.plan, self.handle, self.events = engine, spec, plan, handle, events
        self.text = StreamText(plan.text_key, plan.offset, spec.stop, plan.stop.cut if plan.stop else None,
                               llama=engine.dialect == "llamacpp")
        self.generated = 0
        self.finished = False

    def of(self, event: TokenEvent) -> list[bytes]:
        """The SSE events of one token event (the closing ones with the last)."""
        out: list[bytes] = []
        reason = event.finish_reason
        for i in range(event.tokens):
            out += self.events.token(self.text.next(reason if i == event.tokens - 1 else None))
        self.generated += event.tokens
        if reason is not None:
            self.finished = True
            self.engine.live.forget(self.plan.core_rid)
            after_finish(self.engine, self.spec, self.plan, self.generated, reason)
            timings = llama_timings(self.handle, self.generated) if isinstance(self.events, LlamaEvents) else None
            out += self.events.closing(self.plan.text(self.generated, reason), self.generated, timings)
        return out


def stream_response(engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                    disconnected: Callable[[], asyncio.Future[Any]], events: VllmEvents | LlamaEvents,
                    early: TokenEvent | None = None) -> AsyncIterator[bytes]:
    """The SSE body of a streamed Responses answer (:func:`sim.token_stream.relay`).

    ``early`` is a first event already taken from the request's queue (llama-server).
    """
    tokens = _Tokens(engine, spec, plan, handle, events)
    return relay(engine, plan, handle, disconnected, tokens, events.opening(), early)
