"""A client's request as the conductor knows it: the validated body and its size estimate.

The API layer makes it (:mod:`syshaxd.api.body` parses at the boundary); the conductor,
the dispatch and the handoffs read it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["chat", "completion"]

#: Characters per token of the estimate. English BPE tokenizers average ~4 characters a
#: token; the estimate only ranks requests by size, so a stable rule beats an exact count.
CHARS_PER_TOKEN = 4.0
#: Per-message overhead of chat templates (role markers, separators), in tokens.
MESSAGE_OVERHEAD = 4


#: The header ``syshax calibrate`` marks its probe requests with (``x-syshax-probe: calibrate``),
#: and the prefix of the request ids it gives them (``sim.calibrate.identity`` sends both).
PROBE_HEADER = b"x-syshax-probe"
PROBE_ID_PREFIX = "syshax-probe-"


def estimate_tokens(text: str) -> int:
    """A deterministic prompt-token estimate: ~4 characters per token, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def dump_body(body: dict[str, Any]) -> bytes:
    """A request body as JSON to send an engine (compact, UTF-8)."""
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # A lone surrogate ("\\ud800" is legal JSON) has no UTF-8 form: keep it escaped as sent.
        return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class ServiceAsk:
    """What a request asks of its service level, every part optional: a class by name
    (``x-syshax-class``), targets that override the class's (``x-slo-ttft-ms``,
    ``x-slo-tpot-ms``), and a priority (the body's ``priority``, vLLM's convention: lower first).
    The conductor resolves it against the live class table."""

    class_name: str | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    priority: int | None = None

    def wire(self) -> list[object]:
        """As a JSON list (the ledger's admit message)."""
        return [self.class_name, self.ttft_ms, self.tpot_ms, self.priority]

    @classmethod
    def from_wire(cls, value: object) -> ServiceAsk:
        """The inverse of :meth:`wire` (anything else: no ask)."""
        if not isinstance(value, list) or len(value) != 4:
            return NO_ASK
        return cls(*value)


#: A request that asks for nothing: its class comes from the rules or the default.
NO_ASK = ServiceAsk()


@dataclass(frozen=True)
class ParsedRequest:
    """A validated request: its body (to forward) and what routing needs."""

    kind: Kind
    body: dict[str, Any]
    raw: bytes  # the body to send upstream (the client's bytes when nothing was filled in)
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int
    prompt_tokens: int
    has_num_decode_tokens: bool
    messages: int = 0  # chat messages (the class rules may count them)
    temperature: float | None = None
    ask: ServiceAsk = NO_ASK
    #: The client's W3C trace context (``traceparent``, ``tracestate``), when it sent one.
    trace: tuple[tuple[str, str], ...] = ()
    n: int = 1  # choices asked for: the engine runs that many sequences
    #: Marked as a probe of ``syshax calibrate`` (:data:`PROBE_HEADER`): served, never recorded.
    probe: bool = False
    #: The name of the API key that authenticated it (never the secret); None without keys.
    api_key_name: str | None = None

    @property
    def path(self) -> str:
        """The engine route for this request."""
        return "/v1/chat/completions" if self.kind == "chat" else "/v1/completions"
