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
from collections.abc import Callable, Sequence
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


async def _run_on(engine: SimEngine, handle: Handle, left: float, generated: list[int],
                  reasons: list[str | None]) -> None:
    """A llama.cpp request after its client left at ``left`` (monotonic seconds): its choices
    run on (``generated`` and ``reasons`` grow) until they end or a quiet second cancels them."""
    while any(reason is None for reason in reasons):
        wait = max(left, engine.last_result) + QUIET_SECONDS - time.monotonic()
        if wait <= 0:
            return
        try:
            event = await asyncio.wait_for(handle.events.get(), wait)
        except asyncio.TimeoutError:  # the builtin TimeoutError only from Python 3.11
            continue  # look again: another result may have come in the meantime
        generated[event.choice] += event.tokens
        if event.finish_reason is not None:
            reasons[event.choice] = event.finish_reason


async def _collect(engine: SimEngine, handle: Handle, gone: asyncio.Future[Any],
                   n: int) -> tuple[list[int], list[str | None], bool]:
    """Tokens generated and the finish reason (None: cancelled) of each of ``n`` choices (their
    events come on ``handle``'s queue), and whether the client left."""
    generated: list[int] = [0] * n
    reasons: list[str | None] = [None] * n
    while True:
        event = await next_event(handle, gone)
        if event is None:
            if engine.dialect == "llamacpp":
                await _run_on(engine, handle, time.monotonic(), generated, reasons)
            return generated, reasons, True
        generated[event.choice] += event.tokens
        if event.finish_reason is not None:
            reasons[event.choice] = event.finish_reason
            if all(reason is not None for reason in reasons):
                return generated, reasons, False


@dataclass(frozen=True)
class Finished:
    """A generation that ran to its end for a client still waiting."""

    generated: int
    reason: str
    kv_transfer_params: dict[str, Any] | None


async def finished(engine: SimEngine, spec: GenSpec, plan: Plan, handle: Handle,
                   disconnected: Callable[[], asyncio.Future[Any]]) -> Finished | None:
    """Wait for the whole answer; None if the client went away (the request is then aborted, see above)."""
    done = await finished_choices(engine, spec, [(plan, handle)], disconnected)
    return done[0] if done is not None else None


async def finished_choices(engine: SimEngine, spec: GenSpec, choices: Sequence[tuple[Plan, Handle]],
                           disconnected: Callable[[], asyncio.Future[Any]]) -> list[Finished] | None:
    """Wait for every choice of the whole answer; None if the client went away (all are then aborted)."""
    gone = disconnected()
    try:
        generated, reasons, left = await _collect(engine, choices[0][1], gone, len(choices))
    finally:
        gone.cancel()
        for plan, _ in choices:
            engine.done(plan.core_rid)
    if any(reason is None for reason in reasons):
        for plan, _ in choices:
            engine.live.abort(plan.core_rid)
        return None
    out = []
    for (plan, _), tokens, reason in zip(choices, generated, reasons, strict=True):
        assert reason is not None
        engine.live.forget(plan.core_rid)
        out.append(Finished(tokens, reason, after_finish(engine, spec, plan, tokens, reason)))
    engine.result_posted()
    if left:
        return None  # it ran to its end for nobody
    return out


async def full_answer(engine: SimEngine, spec: GenSpec, choices: Sequence[tuple[Plan, Handle]],
                      disconnected: Callable[[], asyncio.Future[Any]], native: bool = False) -> dict[str, Any] | None:
    """The whole answer's body in the engine's format; None if the client went away.

    Several choices: vLLM's usage counts the prompt once and every choice's tokens;
    llama-server's (and its ``timings``) are the first choice's alone, as the real one reports.
    """
    done = await finished_choices(engine, spec, choices, disconnected)
    if done is None:
        return None
    answer = _one(engine, spec, choices[0], done[0], sum(d.generated for d in done), native)
    for i, ((plan, handle), each) in enumerate(zip(choices, done, strict=True)):
        if i:
            choice = _one(engine, spec, (plan, handle), each, each.generated, native)["choices"][0]
            answer["choices"].append({**choice, "index": i})
    return answer


def _one(engine: SimEngine, spec: GenSpec, choice: tuple[Plan, Handle], done: Finished, completion: int,
         native: bool) -> dict[str, Any]:
    """The answer of one choice (``completion``: the usage's tokens, vLLM's of every choice)."""
    plan, handle = choice
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
                         plan.sim.context_tokens, completion, role=spec.role, kv_transfer_params=params,
                         stop_reason=plan.stop_word if reason == "stop" else None)
