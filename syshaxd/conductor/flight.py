"""One request's life inside the conductor: its deadline, the engines it holds, how it ended.

A flight is bound to the conductor's books when it is made (:meth:`Conductor.new_flight`).
Dispatch and every handoff talk to the flight -- ``first_byte``, ``release(engine)``,
``reask``, ``resubmit``, ``finish(outcome)`` -- and never to the conductor: the flight
changes the counts, undoes exactly what it did, and writes the request's record once.

:class:`Flight` is what dispatch may do with one; :class:`BookedFlight` keeps the books in
this process, :class:`~syshaxd.conductor.remote.RemoteFlight` in a worker process tells the
daemon's books over the ledger (``services.conductor.workers``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from syshaxd.conductor.books import Books
from syshaxd.conductor.records import Record
from syshaxd.engines import EngineClient
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.schema import DecisionModel
from syshaxd.snapshot import Snapshot

log = logging.getLogger("syshaxd.conductor")
access_log = logging.getLogger("syshaxd.access")


class Router(Protocol):
    """What a flight may ask of the conductor's routing while it runs."""

    def reask(self, features: RequestFeatures) -> Decision:
        """The policy's decision for a request already under way."""
        ...

    def other_engine(self, failed: EngineClient) -> EngineClient | None:
        """A usable engine on the other device than ``failed``'s, if any."""
        ...


class Flight(Protocol):
    """A request being served, as dispatch and the handoffs see it."""

    request_id: str
    parsed: ParsedRequest
    features: RequestFeatures

    def remaining(self) -> float:
        """Seconds left before the request times out (never negative)."""
        ...

    def first_byte(self, engine: EngineClient) -> None:
        """The engine started answering."""
        ...

    def answering(self, engine: EngineClient) -> None:
        """The engine sent more of the answer."""
        ...

    def release(self, engine: EngineClient) -> None:
        """This engine's part is over."""
        ...

    async def reask(self, features: RequestFeatures) -> Decision:
        """The policy's decision for the request now, mid-way."""
        ...

    async def resubmit(self, failed: EngineClient) -> EngineClient | None:
        """An engine on the other device, reserved, for one that failed before any byte."""
        ...

    def rerouted(self, engine: EngineClient, why: str) -> None:
        """The whole request now runs on ``engine``."""
        ...

    def finish(self, outcome: str, tokens: int | None = None) -> None:
        """The request ended (any way): release everything, once."""
        ...


@dataclass(eq=False)
class BookedFlight:
    """A request being served against this process's books: what it holds is always released
    exactly once."""

    request_id: str
    parsed: ParsedRequest
    features: RequestFeatures
    deadline: float  # time.monotonic()
    books: Books
    router: Router
    t0: float = field(default_factory=time.monotonic)
    decision: DecisionModel | None = None
    ttft: float | None = None
    expired: bool = False
    resubmitted: bool = False
    finished: bool = False
    seen: Snapshot | None = None  # what the policy saw when it routed the request
    limits: Limits | None = None  # ... and the limits it applied
    decided: float | None = None  # time.monotonic() of that decision
    _holds: set[str] = field(default_factory=set)  # engine names counted in inflight
    _unstarted: set[str] = field(default_factory=set)  # ... and still counted in scheduled

    @property
    def forced_mode(self) -> Mode | None:
        """The mode the route asked for (``/v1/chat/pd_disagg``), if any."""
        return self.features.forced_mode

    def remaining(self) -> float:
        """Seconds left before the request times out (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    # -- the engines it holds ----------------------------------------------------------

    def reserve(self, engine: EngineClient) -> None:
        """Count this request against an engine until released."""
        if engine.name in self._holds:
            return
        book = self.books.engines[engine.name]
        self._holds.add(engine.name)
        self._unstarted.add(engine.name)
        book.inflight += 1
        book.scheduled += 1
        book.decode_tokens += self.features.max_tokens
        book.prompt_tokens += self.features.prompt_tokens

    def first_byte(self, engine: EngineClient) -> None:
        """The engine started answering: it is no longer merely scheduled."""
        book = self.books.engines[engine.name]
        book.answered_at = time.monotonic()
        if engine.name in self._unstarted:
            self._unstarted.discard(engine.name)
            book.scheduled -= 1
            book.prompt_tokens -= self.features.prompt_tokens
            book.answers[self] = (book.answered_at, self.features.max_tokens)
        if self.ttft is None:
            self.ttft = time.monotonic() - self.t0

    def answering(self, engine: EngineClient) -> None:
        """The engine sent more of the answer (it is alive, whatever its scrapes say)."""
        self.books.engines[engine.name].answered_at = time.monotonic()

    def release(self, engine: EngineClient) -> None:
        """This engine's part is over: stop counting against it and let a waiting request in."""
        if self._release(engine.name):
            self.books.on_release()

    def _release(self, name: str) -> bool:
        book = self.books.engines[name]
        if name in self._unstarted:
            self._unstarted.discard(name)
            book.scheduled -= 1
            book.prompt_tokens -= self.features.prompt_tokens
        if name in self._holds:
            self._holds.discard(name)
            book.inflight -= 1
            book.decode_tokens -= self.features.max_tokens
            book.answers.pop(self, None)
            return True
        return False

    # -- asking the conductor's routing ------------------------------------------------

    async def reask(self, features: RequestFeatures) -> Decision:
        """Ask the policy again mid-request (the CPU stopped at its token limit)."""
        return self.router.reask(features)

    async def resubmit(self, failed: EngineClient) -> EngineClient | None:
        """See :meth:`take_other`."""
        return self.take_other(failed)

    def take_other(self, failed: EngineClient) -> EngineClient | None:
        """Once per request: an engine on the other device, reserved, for an engine that failed
        before the client saw a byte; None when already resubmitted or none is usable."""
        if self.resubmitted:
            return None
        other = self.router.other_engine(failed)
        if other is None:
            return None
        self.resubmitted = True
        self.reserve(other)
        self.books.stats.record_resubmit()
        self.rerouted(other, f"resubmitted: {failed.name} failed")
        return other

    def rerouted(self, engine: EngineClient, why: str) -> None:
        """The whole request now runs on ``engine``: the recorded decision says so, and why."""
        if self.decision is not None:
            self.decision = self.decision.model_copy(update={
                "device": engine.device, "mode": Mode.WHOLE.value, "engine": engine.name,
                "reason": f"{why}; {self.decision.reason}"})

    # -- the end -----------------------------------------------------------------------

    def finish(self, outcome: str, tokens: int | None = None) -> None:
        """The request ended (any way): release everything, record it once, log one line."""
        if self.finished:
            return
        self.finished = True
        released = False
        for name in list(self._holds):
            released = self._release(name) or released
        e2e = time.monotonic() - self.t0
        stats = self.books.stats
        if self.decision is not None:
            self.decision = stats.record_finish(self.decision, outcome, self.ttft, e2e)
        else:  # never routed: rejected, or timed out in the queue
            stats.record_unrouted(outcome)
        self._log(outcome, e2e, tokens)
        self._keep(outcome, e2e, tokens)
        self.books.closed(self)
        if released:
            self.books.on_release()

    def _keep(self, outcome: str, e2e: float, tokens: int | None) -> None:
        parsed = self.parsed
        self.books.records.add(Record(
            self.request_id, time.time() - e2e, parsed.kind, parsed.stream, self.features.prompt_tokens,
            self.features.max_tokens, tokens, outcome, self.decision, self.seen, self.limits,
            self.decided - self.t0 if self.decided is not None else None, self.ttft, e2e))

    def _log(self, outcome: str, e2e: float, tokens: int | None) -> None:
        d = self.decision
        access_log.info(
            "request id=%s kind=%s device=%s mode=%s engine=%s outcome=%s ttft=%s e2e=%.3f "
            "prompt_tokens~%d max_tokens=%d tokens=%s reason=%r",
            self.request_id, self.parsed.kind, d.device if d else None, d.mode if d else None,
            d.engine if d else None, outcome, f"{self.ttft:.3f}" if self.ttft is not None else "-",
            e2e, self.features.prompt_tokens, self.features.max_tokens,
            tokens if tokens is not None else "-", d.reason if d else "",
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request id=%s body=%s", self.request_id, self.parsed.raw[:2000].decode("utf-8", "replace"))
