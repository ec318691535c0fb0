"""``llamacpp-slots`` as the conductor runs it: a checked pair, reserved slots, reused save files.

Per split: check the pair (once, see :mod:`syshaxd.conductor.handoff.llamacpp_pairs`), reserve an
idle slot on each server, prefill + save on the GPU-side server, restore on the CPU-side
server, then hand the dispatcher a decode request pinned to that slot.

llama-server never deletes a slot file and does not say where its ``--slot-save-path``
is, so the conductor cannot delete them either. Instead a file is named after the GPU-side
slot it was saved from (``syshax-<engine>-slot<N>.bin``) and that slot stays reserved
until the restore has read it: files never accumulate (at most one per GPU-side slot,
each overwritten by the next split from that slot) and no save overwrites a file that
a restore is still reading. The CPU-side slot stays reserved until the decode request
was answered, so a second split does not restore into it meanwhile (its decode would
wait behind this one).

The llama-server calls themselves live in :mod:`syshaxd.conductor.handoff.llamacpp_slots`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from syshaxd.conductor.handoff.context import DecodeRequest, SplitContext
from syshaxd.conductor.handoff.llamacpp_pairs import PairChecks, PairVerdict
from syshaxd.conductor.handoff.llamacpp_slots import (
    HandoffError,
    decode_body,
    idle_slot,
    prefill_and_save,
    restore,
    slot_filename,
)
from syshaxd.engines import EngineClient, EngineFailure


def save_filename(engine: str, id_slot: int) -> str:
    """The slot file for splits prefilled in slot ``id_slot`` of ``engine`` (reused)."""
    return slot_filename(f"{engine}-slot{id_slot}")


class SlotHandoff:
    """``llamacpp-slots`` for one conductor: pair verdicts and the slots its splits hold."""

    def __init__(self, checks: PairChecks | None = None) -> None:
        """Use ``checks`` (default: a new :class:`PairChecks`)."""
        self.checks = checks or PairChecks()
        self._reserved: dict[str, set[int]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def check_pairs(self, gpus: Sequence[EngineClient], cpus: Sequence[EngineClient]) -> list[PairVerdict]:
        """Check every GPU -> CPU pair (at start; results are logged and kept)."""
        return await self.checks.check_all((g, c) for g in gpus for c in cpus)

    async def _reserve(self, up: EngineClient) -> int:
        async with self._locks.setdefault(up.name, asyncio.Lock()):
            taken = self._reserved.setdefault(up.name, set())
            try:
                slot = await idle_slot(up.http, side=up.name, exclude=taken)
            except HandoffError as exc:
                raise EngineFailure(up.name, str(exc)) from None
            if slot is None:
                raise EngineFailure(up.name, "no idle slot for a llamacpp-slots handoff")
            taken.add(slot)
            return slot

    def _free(self, up: EngineClient, slot: int | None) -> None:
        if slot is not None:
            self._reserved.get(up.name, set()).discard(slot)

    async def prefill(self, ctx: SplitContext) -> DecodeRequest:
        """Prefill on the GPU-side server, move its slot to the CPU-side server, return the decode request.

        Raises:
            EngineFailure: the pair is not (known to be) compatible, or a step failed; the
                dispatcher then runs the request whole on the CPU-side engine.
        """
        gpu, cpu = ctx.gpu, ctx.cpu
        verdict = await self.checks.verdict(gpu, cpu)
        if not verdict.ok:
            raise EngineFailure(cpu.name, f"llamacpp-slots {gpu.name} -> {cpu.name} unusable: {verdict.message}")
        slot_a = slot_b = None
        try:
            slot_a = await self._reserve(gpu)
            slot_b = await self._reserve(cpu)
            filename = save_filename(gpu.name, slot_a)
            await prefill_and_save(gpu.http, ctx.parsed.body, id_slot=slot_a, filename=filename,
                                   path=ctx.parsed.path, side=gpu.name)
            ctx.flight.release(gpu)
            await restore(cpu.http, filename, id_slot=slot_b, side=cpu.name)
        except HandoffError as exc:
            self._free(cpu, slot_b)
            # A server may have been restarted with another model: check before the next split.
            self.checks.forget(gpu.name, cpu.name)
            raise EngineFailure(gpu.name if exc.side == gpu.name else cpu.name, str(exc)) from None
        except BaseException:
            self._free(cpu, slot_b)
            raise
        finally:
            self._free(gpu, slot_a)
        body = json.dumps(decode_body(ctx.parsed.body, slot_b)).encode()
        return DecodeRequest(body, {}, on_sent=lambda: self._free(cpu, slot_b))
