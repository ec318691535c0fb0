"""llama-server's slot endpoints: ``GET /slots`` and ``POST /slots/{id}?action=save|restore|erase``.

Slots are llama.cpp's parallel sequences (``-np``). ``GET /slots`` shows what each is
doing, shaped like the real capture (``shared/fixtures/metrics/llamacpp-server-slots-
tiny-capture.json``). Save and restore write and read a small JSON file in
``--slot-save-path`` and take the time a real KV file of that size would take at the
profile's handoff bandwidth.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sim.core import State
from sim.engine import SimEngine
from sim.handoff import SlotCache, SlotFileError, restore_slot, save_slot, slot_file
from sim.llama_params import params_json


def _assign(engine: SimEngine) -> dict[int, Any]:
    """Active sequences by slot: pinned ones in their slot, the rest in free slots in order."""
    core = engine.live.core
    active = [s for s in (*core.running, *core.loading) if s.state in (State.RUNNING, State.LOADING)]
    by_slot: dict[int, Any] = {}
    unpinned = []
    for seq in active:
        pin = engine.pins.get(seq.rid)
        if pin is not None and pin not in by_slot:
            by_slot[pin] = seq
        else:
            unpinned.append(seq)
    free = [i for i in range(len(engine.slots)) if i not in by_slot]
    for i, seq in zip(free, unpinned, strict=False):
        by_slot[i] = seq
    return by_slot


def slots_json(engine: SimEngine) -> list[dict[str, Any]]:
    """The ``GET /slots`` array.

    A slot that never ran a task has only ``id, n_ctx, speculative, is_processing``. The
    per-request counters (``n_decoded``, ``n_prompt_tokens_processed``) read 0 once the
    slot is released, and ``n_prompt_tokens`` is then the sequence the slot caches.
    """
    n_ctx = engine.layout.slot_n_ctx
    busy = _assign(engine)
    out: list[dict[str, Any]] = []
    for i, cache in enumerate(engine.slots):
        seq = busy.get(i)
        slot: dict[str, Any] = {"id": i, "n_ctx": n_ctx, "speculative": False, "is_processing": seq is not None}
        if seq is not None:
            params = engine.params.get(seq.rid, cache.params)
            # llama.cpp counts down from n_predict as asked; -1 (no limit) stays -1
            remain = params.n_predict - seq.generated if params.n_predict >= 0 else -1
            slot.update({
                "id_task": engine.task_ids.get(seq.rid, -1),
                # as llama-server counts it: the slot's sequence, decoded tokens included
                "n_prompt_tokens": seq.req.context_tokens + seq.generated,
                "n_prompt_tokens_processed": seq.prefill_done,
                "n_prompt_tokens_cache": seq.req.kv_ready_tokens,
                "params": params_json(params),
                "next_token": [{"has_next_token": True, "has_new_line": False,
                                "n_remain": remain, "n_decoded": seq.generated}],
            })
        elif cache.task >= 0:
            slot.update({
                "id_task": cache.task,
                "n_prompt_tokens": cache.tokens,
                "n_prompt_tokens_processed": 0,
                "n_prompt_tokens_cache": cache.tokens,
                "params": params_json(cache.params),
                "next_token": [{"has_next_token": False, "has_new_line": False, "n_remain": -1, "n_decoded": 0}],
            })
        out.append(slot)
    return out


def _llama_error(message: str, status: int, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"code": status, "message": message, "type": kind}}, status_code=status)


async def slot_action(engine: SimEngine, request: Request) -> Response:
    """Save, restore or erase one slot's cache (in llama-server's order of checks)."""
    if engine.opts.slot_save_path is None:
        return _llama_error("This server does not support slots action. Start it with `--slot-save-path`", 501,
                            "not_supported_error")
    try:
        id_slot = int(request.path_params["id_slot"])
    except ValueError:
        return _llama_error("Invalid slot ID", 400, "invalid_request_error")
    if not 0 <= id_slot < len(engine.slots):
        return _llama_error("Invalid slot ID", 400, "invalid_request_error")
    action = request.query_params.get("action")
    if action == "erase":
        old = engine.slots[id_slot]
        engine.slots[id_slot] = SlotCache(task=old.task, used_at=old.used_at, params=old.params)
        return JSONResponse({"id_slot": id_slot, "n_erased": old.tokens})
    if action not in ("save", "restore"):
        return _llama_error("Invalid action", 400, "invalid_request_error")
    # llama-server parses the body with nlohmann::json and answers its exceptions with a 500
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        return _llama_error(f"[json.exception.parse_error.101] parse error: {exc}", 500, "server_error")
    if not isinstance(body, dict) or "filename" not in body:
        return _llama_error("[json.exception.out_of_range.403] key 'filename' not found", 500, "server_error")
    model = engine.profile.model_name
    kv_bytes = engine.profile.kv_bytes_per_token
    try:
        path = slot_file(engine.opts.slot_save_path, body.get("filename"))
        if action == "save":
            cache = engine.slots[id_slot]
            written = save_slot(path, cache, model, kv_bytes)
            seconds = written / engine.profile.handoff_bandwidth
            await asyncio.sleep(engine.live.wall_delay(seconds))
            return JSONResponse({"id_slot": id_slot, "filename": path.name, "n_saved": cache.tokens,
                                 "n_written": written, "timings": {"save_ms": round(seconds * 1000, 3)}})
        cache = restore_slot(path, model)
        read = int(cache.tokens * kv_bytes)
        seconds = read / engine.profile.handoff_bandwidth
        await asyncio.sleep(engine.live.wall_delay(seconds))
        old = engine.slots[id_slot]
        # /slots shows what the slot last ran, not what was restored into it
        engine.slots[id_slot] = replace(cache, task=old.task, used_at=old.used_at, params=old.params)
        return JSONResponse({"id_slot": id_slot, "filename": path.name, "n_restored": cache.tokens,
                             "n_read": read, "timings": {"restore_ms": round(seconds * 1000, 3)}})
    except SlotFileError as exc:
        return _llama_error(str(exc), exc.status, exc.kind)
