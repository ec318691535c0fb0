"""A non-streamed answer: wait for the whole generation, then answer one JSON body.

A client that goes away aborts its request at once (vLLM, SGLang), except in the
``llamacpp`` dialect. llama-server's HTTP thread waits for a non-streamed result on a
queue that all requests share, and looks at its client's socket only when a full second
passed with no result on that queue (``HTTP_POLLING_SECONDS``); every token of a stream,
every other answer and every ``/metrics``, ``/slots`` or slot-action answer starts the
second again. So an abandoned non-streamed request runs on while anyone else talks to
the server, and is cancelled only after a quiet second (docs/llama.md, "Disconnects").
That second is wall-clock time, as on the real server: ``--speed`` does not scale it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.api_format import full_response
from sim.api_request import GenSpec
from sim.engine import SimEngine
from sim.generation import Plan, after_finish, llama_timings, next_event
from sim.llama_format import llama_response
from sim.llama_server import native_completion
from sim.realtime import Handle

#: llama-server's HTTP_POLLING_SECONDS: how long a non-streamed request waits for any result before it looks at its client.
QUIET_SECONDS = 1.0


async def _run_on(engine: SimEngine, handle: Handle, left: float) -> tuple[int, str | None]:
    """A llama.cpp request after its client left at ``left`` (monotonic seconds).

    Returns the tokens it generated since, and its finish reason, or None when a quiet
    second cancelled it.
    """
    generated = 0
    while True:
        wait = max(left, engine.last_result) + QUIET_SECONDS - time.monotonic()
        if wait <= 0:
            return generated, None
        try:
            event = await asyncio.wait_for(handle.events.get(), wait)
        except asyncio.TimeoutError:  # the builtin TimeoutError only from Python 3.11
            continue  # look again: another result may have come in the meantime
        generated += event.tokens
        if event.finish_reason is not None:
            return generated, event.finish_reason


async def _collect(engine: SimEngine, handle: Handle, gone: asyncio.Future[Any]) -> tuple[int, str | None, bool]:
    """Tokens generated, the finish reason (None: cancelled) and whether the client left."""
    generated = 0
    while True:
        event = await next_event(handle, gone)
        if event is None:
            if engine.dialect != "llamacpp":
                return generated, None, True
            more, reason = await _run_on(engine, handle, time.monotonic())
            return generated + more, reason, True
        generated += event.tokens
        if event.finish_reason is not None:
            return generated, event.finish_reason, False


@dataclass(frozen=True)
class Finished:
    """A generation that ran to its end for a client still waiting."""

    generated: int
    reason: str
    kv_transfer_params: dict[str, Any] | None


async def finished(engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                   disconnected: Callable[[], asyncio.Future[Any]]) -> Finished | None:
    """Wait for the whole answer; None if the client went away (the request is then aborted, see above)."""
    gone = disconnected()
    try:
        generated, reason, left = await _collect(engine, handle, gone)
    finally:
        gone.cancel()
        engine.done(plan.core_rid)
    if reason is None:
        engine.live.abort(plan.core_rid)
        return None
    engine.live.forget(plan.core_rid)
    engine.result_posted()
    params = after_finish(engine, spec, plan, generated, reason)
    if left:
        return None  # it ran to its end for nobody
    return Finished(generated, reason, params)


async def full_answer(engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                      disconnected: Callable[[], asyncio.Future[Any]], native: bool = False) -> dict[str, Any] | None:
    """The whole answer's body in the engine's format; None if the client went away."""
    done = await finished(engine, spec, plan, handle, disconnected)
    if done is None:
        return None
    generated, reason, params = done.generated, done.reason, done.kv_transfer_params
    text = plan.text(generated, reason)
    if native:
        word = plan.stop_word if reason == "stop" else None
        stop_type = "word" if word is not None else "limit" if reason == "length" else "eos"
        return native_completion(content=text, model=spec.model, id_slot=plan.slot if plan.slot is not None else -1,
                                 prompt_tokens=plan.sim.context_tokens, predicted=generated,
                                 cached=plan.sim.kv_ready_tokens, stop_type=stop_type, stopping_word=word or "",
                                 timings=llama_timings(handle, generated), stream=False)
    if engine.dialect == "llamacpp":
        return llama_response(spec.kind, plan.response_id, int(time.time()), spec.model, text, reason,
                              plan.sim.context_tokens, generated, plan.sim.kv_ready_tokens,
                              llama_timings(handle, generated), role=spec.role)
    return full_response(spec.kind, plan.response_id, int(time.time()), spec.model, text, reason,
                         plan.sim.context_tokens, generated, role=spec.role, kv_transfer_params=params,
                         stop_reason=plan.stop_word if reason == "stop" else None)
