"""Prefill/decode handoff protocols: how a request prefilled on the GPU is decoded on the CPU.

Two shapes exist. *Merging* protocols (``recompute``, ``syshax``) yield the answer as
pieces from both engines, and the conductor writes them as one response. *Prefill-first*
protocols (``kv-transfer``, ``llamacpp-slots``) run the prefill, then hand the conductor a
decode request whose answer passes through untouched. A new protocol is one module here.
"""

from __future__ import annotations

from syshaxd.conductor.handoff import kv_transfer, recompute, syshax
from syshaxd.conductor.handoff.context import (
    DecodeRequest,
    MergingHandoff,
    SplitContext,
    with_token_limit,
)
from syshaxd.conductor.handoff.slots import SlotHandoff

__all__ = [
    "DecodeRequest", "MergingHandoff", "SlotHandoff", "SplitContext", "kv_transfer", "recompute",
    "syshax", "with_token_limit",
]  # fmt: skip
