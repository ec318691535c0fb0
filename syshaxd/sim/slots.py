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
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from syshaxd.sim.core import State
from syshaxd.sim.handoff import SlotCache, SlotFileError, restore_slot, save_slot, slot_file

if TYPE_CHECKING:
    from syshaxd.sim.server import SimEngine

SAMPLERS = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


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
    """The ``GET /slots`` array."""
    n_ctx = engine.layout.slot_n_ctx
    busy = _assign(engine)
    out = []
    for i in range(len(engine.slots)):
        seq = busy.get(i)
        cache = engine.slots[i]
        processing = seq is not None
        n_prompt = seq.req.context_tokens if seq else cache.tokens
        max_new = seq.req.max_new_tokens if seq else -1
        out.append({
            "id": i,
            "n_ctx": n_ctx,
            "speculative": False,
            "is_processing": processing,
            "id_task": engine.task_ids.get(seq.rid, -1) if seq else -1,
            "n_prompt_tokens": n_prompt,
            "n_prompt_tokens_processed": seq.prefill_done if seq else 0,
            "n_prompt_tokens_cache": seq.req.kv_ready_tokens if seq else cache.tokens,
            "params": {
                "seed": 4294967295, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                "typical_p": 1.0, "repeat_last_n": 64, "repeat_penalty": 1.0, "presence_penalty": 0.0,
                "frequency_penalty": 0.0, "max_tokens": max_new, "n_predict": max_new, "n_keep": 0,
                "n_discard": 0, "ignore_eos": False, "stream": True, "n_probs": 0, "min_keep": 0,
                "chat_format": "Content-only", "samplers": SAMPLERS, "lora": [],
            },
            "next_token": [{
                "has_next_token": processing,
                "has_new_line": False,
                "n_remain": (max_new - seq.generated) if seq else -1,
                "n_decoded": seq.generated if seq else 0,
            }],
        })
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
        n = engine.slots[id_slot].tokens
        engine.slots[id_slot] = SlotCache()
        return JSONResponse({"id_slot": id_slot, "n_erased": n})
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
        engine.slots[id_slot] = cache
        return JSONResponse({"id_slot": id_slot, "filename": path.name, "n_restored": cache.tokens,
                             "n_read": read, "timings": {"restore_ms": round(seconds * 1000, 3)}})
    except SlotFileError as exc:
        return _llama_error(str(exc), exc.status, exc.kind)
