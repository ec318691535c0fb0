"""What every handoff protocol is given (:class:`SplitContext`) and may give back (:class:`DecodeRequest`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from syshaxd.conductor.chunks import Piece
from syshaxd.conductor.flight import Flight
from syshaxd.engines import EngineClient
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision


@dataclass
class SplitContext:
    """What a handoff needs: the request's flight, both engines and the decision.

    A handoff reports to the flight (``first_byte``, ``release``, ``reask``), never to
    the conductor.
    """

    flight: Flight
    gpu: EngineClient
    cpu: EngineClient
    decision: Decision
    notes: list[str] = field(default_factory=list)

    @property
    def parsed(self) -> ParsedRequest:
        """The client's request."""
        return self.flight.parsed

    @property
    def request_id(self) -> str:
        """The request's id (also sent to engines that take one)."""
        return self.flight.request_id


@dataclass(frozen=True)
class DecodeRequest:
    """A prefill-first protocol's result: what to send the decode engine."""

    body: bytes
    headers: dict[str, str]
    #: Called once the decode engine answered or failed (frees what the protocol reserved).
    on_sent: Callable[[], None] | None = None


MergingHandoff = Callable[[SplitContext], AsyncIterator[Piece]]


def with_token_limit(body: dict[str, Any], limit: int) -> dict[str, Any]:
    """A copy of ``body`` limited to ``limit`` new tokens, in whichever key(s) the client used."""
    out = dict(body)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = limit
    out["max_tokens"] = limit
    return out
