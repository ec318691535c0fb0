"""A client's request as the conductor knows it: the validated body and its size estimate.

The API layer makes it (:mod:`syshaxd.api.body` parses at the boundary); the conductor,
the dispatch and the handoffs read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["chat", "completion"]

#: Characters per token of the estimate. English BPE tokenizers average ~4 characters a
#: token; the estimate only ranks requests by size, so a stable rule beats an exact count.
CHARS_PER_TOKEN = 4.0
#: Per-message overhead of chat templates (role markers, separators), in tokens.
MESSAGE_OVERHEAD = 4


def estimate_tokens(text: str) -> int:
    """A deterministic prompt-token estimate: ~4 characters per token, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


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

    @property
    def path(self) -> str:
        """The engine route for this request."""
        return "/v1/chat/completions" if self.kind == "chat" else "/v1/completions"
