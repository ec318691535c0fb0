"""Planning one generation request: handoff lookup, its length and finish, the core request.

The answer itself is :mod:`sim.full_answer` (non-streamed) or :mod:`sim.stream_answer`.

Handoff rules (see ``docs/simulator.md``):
- ``syshax``: ``num_decode_tokens: K`` stops after K new tokens with ``finish_reason:
  "scheduled"`` (unless the answer ends first) and keeps the KV under the response id;
  ``request_id_inference: <id>`` continues from that KV, ``generated_text`` counts as
  answer already written.
- ``kv-transfer``: a body whose ``kv_transfer_params.do_remote_decode`` is true answers
  with top-level ``kv_transfer_params`` and holds its blocks for the decode side; a body
  with ``do_remote_prefill`` pulls them.
- ``llamacpp-slots``: a request pinned to ``id_slot`` reuses that slot's cache when the
  prompt matches (after ``POST /slots/{id}?action=restore``).
A decode whose KV is not found recomputes the prefill; the ``X-Sim-Handoff`` response
header says ``transferred``, ``local``, ``slot`` or ``recomputed``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from sim import textgen, timing
from sim.api_request import GenSpec
from sim.core import SimRequest
from sim.engine import SimEngine
from sim.handoff import HANDOFF_HEADER, KvEntry, SlotCache
from sim.llama_server import timings
from sim.realtime import Handle, TokenEvent
from sim.stops import StopHit, find_stop


@dataclass
class Plan:
    """How the engine will run one request."""

    response_id: str
    request_id: str  # X-Request-Id, or the generated id without prefix
    core_rid: str
    text_key: int
    offset: int
    sim: SimRequest
    handoff: str | None  # value of the X-Sim-Handoff header
    slot: int | None = None  # llama.cpp: the slot the request runs in (None: deferred, all busy)
    task: int = 0  # llama.cpp id_task
    stop: StopHit | None = None  # the stop string that ends the answer, if one does

    def text(self, generated: int, reason: str | None) -> str:
        """The answer's text after ``generated`` tokens (cut at its stop string when that ended it)."""
        text = textgen.generate(self.text_key, self.offset, generated)
        return text[: self.stop.cut] if self.stop is not None and reason == "stop" else text

    @property
    def stop_word(self) -> str | None:
        """The stop string that ended the answer (vLLM's ``stop_reason``)."""
        return self.stop.word if self.stop is not None else None


def _limit(spec: GenSpec, natural: int | None) -> tuple[int, str]:
    """New tokens to generate and the finish reason when they are done."""
    options = []
    if natural is not None:
        options.append((natural, 0, "stop"))
    options.append((spec.max_new, 1, "length"))
    if spec.num_decode_tokens is not None:
        options.append((spec.num_decode_tokens, 2, "scheduled"))
    tokens, _, reason = min(options)
    return tokens, reason


def _size(engine: SimEngine, spec: GenSpec, key: int, offset: int) -> tuple[int, str, StopHit | None]:
    """New tokens, finish reason and the stop string that ends the answer (if one does)."""
    natural = None
    if not spec.ignore_eos:
        total = textgen.natural_length(key, engine.profile.output_median_tokens, engine.profile.output_sigma)
        natural = max(1, total - offset)
    tokens, reason = _limit(spec, natural)
    hit = find_stop(key, offset, tokens, spec.stop, first_listed=engine.dialect != "llamacpp")
    if hit is not None:
        tokens, reason = hit.tokens, "stop"
    return tokens, reason, hit


def plan_request(engine: SimEngine, spec: GenSpec, x_request_id: str | None) -> Plan:
    """Look up handed-off KV, size the answer and build the core request."""
    base = x_request_id or uuid.uuid4().hex
    # llama-server names both routes' answers chatcmpl-
    chat_id = spec.kind == "chat" or engine.dialect == "llamacpp"
    response_id = ("chatcmpl-" if chat_id else "cmpl-") + base
    key, offset = spec.text_key, spec.offset
    if engine.dialect == "llamacpp":
        # the text depends on the weights: two servers agree only when they load the same file
        key = textgen.request_key(f"{engine.model_file.path}\x00{spec.fingerprint}", spec.seed)
    kv_ready, kv_delay, handoff = 0, 0.0, None
    entry: KvEntry | None = None
    context = spec.prompt_tokens
    if spec.request_id_inference:
        entry = engine.store.take(spec.request_id_inference)
        handoff = "recomputed"
    elif spec.wants_remote_prefill:
        params = spec.kv_transfer_params or {}
        remote_id = params.get("remote_request_id") or x_request_id
        entry = engine.store.take(f"{params.get('remote_engine_id')}/{remote_id}")
        handoff = "recomputed"
    slot = engine.choose_slot(spec)
    if entry is None and handoff is None and slot is not None:
        cache = engine.slots[slot]
        if cache.tokens > 0 and cache.fingerprint == spec.fingerprint:
            # the prompt cache (a restored file or this slot's last request); llama.cpp
            # re-evaluates the last prompt token to get its logits
            kv_ready = max(0, min(cache.tokens, context) - 1)
            if spec.id_slot is not None:
                handoff = "slot"
                engine.stats["handoff_slot"] = engine.stats.get("handoff_slot", 0) + 1
    if entry is not None:
        kv_ready = max(0, min(entry.kv_tokens, context - 1))
        key = entry.text_key
        if spec.request_id_inference:
            offset = entry.generated
        local = entry.origin == engine.name
        kv_delay = 0.0 if local else timing.transfer_time(engine.profile, kv_ready)
        handoff = "local" if local else "transferred"
        engine.stats["handoff_" + handoff] = engine.stats.get("handoff_" + handoff, 0) + 1
    elif handoff == "recomputed":
        engine.stats["handoff_recomputed"] = engine.stats.get("handoff_recomputed", 0) + 1
    if entry is not None and spec.request_id_inference and offset > spec.offset:
        # no (or a shorter) generated_text: the stored count says how much max_tokens is used up
        spec = replace(spec, max_new=max(1, spec.max_new - (offset - spec.offset)))
    tokens, reason, hit = _size(engine, spec, key, offset)
    if spec.wants_remote_decode:
        reason = "length" if tokens == spec.max_new else reason
    core_rid = uuid.uuid4().hex
    sim = SimRequest(
        rid=core_rid,
        context_tokens=context,
        max_new_tokens=tokens,
        finish_reason=reason,
        kv_ready_tokens=kv_ready,
        kv_delay=kv_delay,
        hold_kv=spec.wants_remote_decode,
    )
    return Plan(response_id, base, core_rid, key, offset, sim, handoff, slot, stop=hit)


def plan_choice(engine: SimEngine, spec: GenSpec, first: Plan, choice: int) -> Plan:
    """Choice ``choice`` (> 0) of a request with several: the first's prompt and answer id, a text
    (and length) of its own, its own core request. It finds the prompt computed: vLLM's prefix
    cache shares it (the blocks are cached as they are allocated, so even a choice scheduled in
    the same step finds them), llama-server copies the first choice's slot; like the first
    choice it computes the prompt's last token."""
    key = textgen.request_key(f"{first.text_key}\x00choice {choice}", spec.seed)
    tokens, reason, hit = _size(engine, spec, key, first.offset)
    context = spec.prompt_tokens
    sim = SimRequest(rid=uuid.uuid4().hex, context_tokens=context, max_new_tokens=tokens, finish_reason=reason,
                     kv_ready_tokens=max(first.sim.kv_ready_tokens, context - 1))
    return Plan(first.response_id, first.request_id, sim.rid, key, first.offset, sim, None,
                engine.choose_slot(spec), stop=hit)


def after_finish(engine: SimEngine, spec: GenSpec, plan: Plan, generated: int, reason: str | None) -> dict[str, Any] | None:
    """Export KV for a later decode; returns the response's kv_transfer_params."""
    kv_tokens = plan.sim.context_tokens + max(0, generated - 1)
    if reason == "scheduled":
        engine.store.put(plan.response_id, KvEntry(engine.name, kv_tokens, plan.offset + generated, plan.text_key))
    if plan.slot is not None:
        # the last sampled token is never decoded, so the slot holds prompt + generated - 1;
        # n_predict 0 still samples one token, and the slot keeps exactly the prompt
        kept = 0 if spec.predict_zero else max(0, generated - 1)
        engine.slots[plan.slot] = SlotCache(spec.fingerprint, plan.sim.context_tokens + kept, plan.text_key,
                                            plan.offset + kept, task=plan.task, used_at=time.monotonic(),
                                            params=spec.llama_params)
    if spec.wants_remote_decode and reason != "abort":
        core, rid = engine.live.core, plan.core_rid
        blocks = -(-plan.sim.context_tokens // core.block_size)

        def release() -> None:
            core.release(rid)
            engine.live.wake()

        engine.store.put(
            f"{engine.engine_id}/{plan.request_id}",
            KvEntry(engine.name, plan.sim.context_tokens, 0, plan.text_key, release=release),
        )
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": list(range(min(blocks, 64))),
            "remote_engine_id": engine.engine_id,
            "remote_host": engine.host,
            "remote_port": engine.port,
            "remote_request_id": plan.request_id,
            "tp_size": engine.profile.devices,
        }
    return None


def response_headers(plan: Plan) -> dict[str, str]:
    """Headers every generation response carries."""
    headers = {"x-request-id": plan.request_id}
    if plan.handoff:
        headers[HANDOFF_HEADER] = plan.handoff
    return headers


def llama_timings(handle: Handle, generated: int) -> dict[str, Any]:
    """The request's llama.cpp ``timings`` from its sequence's virtual clock."""
    seq = handle.seq
    start = seq.first_scheduled if seq.first_scheduled is not None else seq.arrival
    first = seq.first_token if seq.first_token is not None else start
    end = seq.finished_at if seq.finished_at is not None else first
    cached = seq.req.kv_ready_tokens
    return timings(prompt_n=seq.req.context_tokens - cached, cache_n=cached, prompt_s=max(0.0, first - start),
                   predicted_n=generated, predicted_s=max(0.0, end - first))


async def next_event(handle: Handle, gone: asyncio.Future[Any]) -> TokenEvent | None:
    """The next event of a request, or None when its client went away first."""
    if not handle.events.empty():
        return handle.events.get_nowait()
    getter = asyncio.ensure_future(handle.events.get())
    done, _ = await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
    if getter in done:
        return getter.result()
    getter.cancel()
    return None
