"""``llamacpp-slots`` as the conductor runs it: idle slots, prefill + save on the GPU-side
server, restore on the CPU-side server, then a decode request pinned to that slot.

The llama-server calls themselves live in :mod:`syshaxd.handoff.llamacpp_slots`.
"""

from __future__ import annotations

import json

from syshaxd.handoff import DecodeRequest, SplitContext
from syshaxd.handoff.llamacpp_slots import (
    HandoffError,
    decode_body,
    idle_slot,
    prefill_and_save,
    restore,
    slot_filename,
)
from syshaxd.upstream import EngineFailure


async def prefill(ctx: SplitContext) -> DecodeRequest:
    """Prefill on the GPU-side server, move its slot to the CPU-side server, return the decode request."""
    gpu, cpu = ctx.gpu, ctx.cpu
    try:
        slot_a = await idle_slot(gpu.client, side=gpu.name)
        if slot_a is None:
            raise EngineFailure(gpu.name, "no idle slot for the prefill")
        slot_b = await idle_slot(cpu.client, side=cpu.name)
        if slot_b is None:
            raise EngineFailure(cpu.name, "no idle slot to restore the prefilled cache into")
        filename = slot_filename(ctx.request_id)
        await prefill_and_save(gpu.client, ctx.parsed.body, id_slot=slot_a, filename=filename,
                               path=ctx.parsed.path, side=gpu.name)
    except HandoffError as exc:
        raise EngineFailure(gpu.name if exc.side == gpu.name else cpu.name, str(exc)) from None
    ctx.release(gpu)
    try:
        await restore(cpu.client, filename, id_slot=slot_b, side=cpu.name)
    except HandoffError as exc:
        raise EngineFailure(cpu.name, str(exc)) from None
    return DecodeRequest(json.dumps(decode_body(ctx.parsed.body, slot_b)).encode(), {})
