"""Prefill/decode handoff protocols: how a request prefilled on the GPU is decoded on the CPU.

Two shapes exist. *Merging* protocols (``recompute``, ``syshax``) yield the answer as
pieces from both engines, and the conductor writes them as one response. *Prefill-first*
protocols (``kv-transfer``, ``llamacpp-slots``) run the prefill, then hand the conductor a
decode request whose answer passes through untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from syshaxd.conductor.chunks import Piece
from syshaxd.engines.client import Upstream
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, RequestFeatures


@dataclass
class SplitContext:
    """What a handoff needs: the request, both engines, and hooks back into the conductor."""

    parsed: ParsedRequest
    request_id: str
    gpu: Upstream
    cpu: Upstream
    decision: Decision
    features: RequestFeatures
    #: Called when an engine produced its first byte / finished its part.
    first_byte: Callable[[Upstream], None]
    release: Callable[[Upstream], None]
    #: Ask the policy again mid-request (sysHAX's "scheduled"); returns the new decision.
    reask: Callable[[RequestFeatures], Decision]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DecodeRequest:
    """A prefill-first protocol's result: what to send the decode engine."""

    body: bytes
    headers: dict[str, str]
    #: Called once the decode engine answered or failed (frees what the protocol reserved).
    on_sent: Callable[[], None] | None = None


MergingHandoff = Callable[[SplitContext], AsyncIterator[Piece]]
PrefillHandoff = Callable[[SplitContext], Any]  # async (ctx) -> DecodeRequest


def with_token_limit(body: dict[str, Any], limit: int) -> dict[str, Any]:
    """A copy of ``body`` limited to ``limit`` new tokens, in whichever key(s) the client used."""
    out = dict(body)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = limit
    out["max_tokens"] = limit
    return out
