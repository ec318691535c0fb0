"""One request's life inside the conductor: its deadline, the engines it holds, its timings."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from syshaxd.engines.client import Upstream
from syshaxd.request import ParsedRequest
from syshaxd.routing import Mode, RequestFeatures
from syshaxd.schema import DecisionModel


@dataclass(eq=False)
class Flight:
    """A request being served: what it holds must always be released exactly once."""

    request_id: str
    parsed: ParsedRequest
    features: RequestFeatures
    forced_mode: Mode | None
    deadline: float  # time.monotonic()
    t0: float = field(default_factory=time.monotonic)
    decision: DecisionModel | None = None
    ttft: float | None = None
    expired: bool = False
    resubmitted: bool = False
    finished: bool = False
    holds: set[Upstream] = field(default_factory=set)  # counted in inflight
    unstarted: set[Upstream] = field(default_factory=set)  # counted in scheduled
    on_finish: Callable[[], None] | None = None  # closes an open upstream response

    def remaining(self) -> float:
        """Seconds left before the request times out (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def reserve(self, up: Upstream) -> None:
        """Count this request against an engine until released."""
        if up in self.holds:
            return
        self.holds.add(up)
        self.unstarted.add(up)
        up.inflight += 1
        up.scheduled += 1
        up.decode_tokens += self.features.max_tokens
        up.prompt_tokens += self.features.prompt_tokens

    def first_byte(self, up: Upstream) -> None:
        """The engine started answering: it is no longer merely scheduled."""
        up.answered_at = time.monotonic()
        if up in self.unstarted:
            self.unstarted.discard(up)
            up.scheduled -= 1
            up.prompt_tokens -= self.features.prompt_tokens
        if self.ttft is None:
            self.ttft = time.monotonic() - self.t0

    def release(self, up: Upstream) -> bool:
        """Stop counting against ``up``; returns whether anything was released."""
        if up in self.unstarted:
            self.unstarted.discard(up)
            up.scheduled -= 1
            up.prompt_tokens -= self.features.prompt_tokens
        if up in self.holds:
            self.holds.discard(up)
            up.inflight -= 1
            up.decode_tokens -= self.features.max_tokens
            return True
        return False

    def release_all(self) -> bool:
        """Release every engine this request holds."""
        released = False
        for up in list(self.holds):
            released = self.release(up) or released
        return released
