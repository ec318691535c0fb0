"""One request's life inside the conductor: its deadline, the engines it holds, how it ended.

A flight is made by the conductor (:meth:`Conductor.new_flight`) around the scheduling
core's ticket. Dispatch and every handoff talk to the flight -- ``first_byte``,
``release(engine)``, ``reask``, ``resubmit``, ``finish(outcome)`` -- and never to the
conductor: the flight tells the core, which undoes exactly what it did, and writes the
request's record once. When the core takes back a request's GPU slot before its first byte,
the flight stops what dispatch registered (``when_revoked``) and its client gets the 429.

:class:`Flight` is what dispatch may do with one; :class:`BookedFlight` is kept by this
process's core, :class:`~syshaxd.conductor.remote.RemoteFlight` in a worker process tells the
daemon's core over the ledger (``services.conductor.workers``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from syshaxd.conductor.books import Books
from syshaxd.conductor.records import Record
from syshaxd.conductor.reply import story_headers
from syshaxd.conductor.tally import Tally
from syshaxd.conductor.tracing import NO_SPAN, Span
from syshaxd.core import Outcome, Scheduler, Ticket
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures, limits_for
from syshaxd.schema import DecisionModel

log = logging.getLogger("syshaxd.conductor")
access_log = logging.getLogger("syshaxd.access")


class Host(Protocol):
    """What a flight needs of the conductor that made it."""

    core: Scheduler
    books: Books
    #: What an engine-second of each engine costs: GPU-seconds on a GPU, cores on a CPU.
    cores: dict[str, int]

    def engine(self, name: str) -> EngineClient:
        """The engine client of a name."""
        ...


class Flight(Protocol):
    """A request being served, as dispatch and the handoffs see it."""

    request_id: str
    parsed: ParsedRequest
    #: The answer's headers that say where it ran and why (:func:`~syshaxd.conductor.reply.story_headers`).
    story: tuple[tuple[bytes, bytes], ...]

    @property
    def features(self) -> RequestFeatures:
        """What the policy knows of the request."""
        ...

    def placed(self, service_class: str, device: str | None, engines: str, mode: str, reason: str) -> None:
        """Where the request runs (its answer's headers say so)."""
        ...

    def trace_headers(self) -> dict[str, str]:
        """The trace context to send the engines (this request's span as their parent), or none."""
        ...

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

    def finish(self, outcome: str, tally: Tally | None = None) -> None:
        """The request ended (any way): release everything, once (``tally``: what the client got)."""
        ...

    @property
    def revoked(self) -> ApiError | None:
        """What its client is told when the core took back its engine before its first byte, or None."""
        ...

    def when_revoked(self, stop: Callable[[ApiError], None]) -> None:
        """Call ``stop`` (once) if the core takes it back before its first byte; at once if it has."""
        ...


@dataclass(eq=False)
class BookedFlight:
    """A request being served against this process's core: what it holds is always released
    exactly once, and its record written once."""

    request_id: str
    parsed: ParsedRequest
    ticket: Ticket
    host: Host
    decision: DecisionModel | None = None
    ttft: float | None = None
    finished: bool = False
    forward_priority: int | None = None  # sent to the engines as the body's priority
    story: tuple[tuple[bytes, bytes], ...] = ()
    span: Span = NO_SPAN
    #: Set while it waits in line: the core's outcome arrives here.
    waiter: asyncio.Future[Outcome] | None = field(default=None, repr=False)
    #: The core's reason when it refused the request (its record says so).
    refused: str | None = None
    #: What its client is told since the core took back its engine before its first byte.
    revoked: ApiError | None = None
    _stop: Callable[[ApiError], None] | None = field(default=None, repr=False)

    @property
    def features(self) -> RequestFeatures:
        """What the policy knows of the request."""
        return self.ticket.features

    @property
    def forced_mode(self) -> Mode | None:
        """The mode the route asked for (``/v1/chat/pd_disagg``), if any."""
        return self.ticket.features.forced_mode

    @property
    def t0(self) -> float:
        """When the request arrived (time.monotonic())."""
        return self.ticket.arrived

    def remaining(self) -> float:
        """Seconds left before the request times out (never negative)."""
        return max(0.0, self.ticket.deadline - time.monotonic())

    def placed(self, service_class: str, device: str | None, engines: str, mode: str, reason: str) -> None:
        """Where the request runs (its answer's headers say so)."""
        self.story = story_headers(self.request_id, service_class, device, engines, mode, reason)

    def trace_headers(self) -> dict[str, str]:
        """The trace context to send the engines (this request's span as their parent), or none."""
        return self.span.headers()

    # -- what its engines do -----------------------------------------------------------

    def first_byte(self, engine: EngineClient) -> None:
        """The engine started answering: it is no longer merely scheduled."""
        now = time.monotonic()
        self.host.books.answered[engine.name] = now
        self.host.core.first_byte(self.ticket, engine.name, now)
        if self.ttft is None:
            self.ttft = now - self.ticket.arrived

    def answering(self, engine: EngineClient) -> None:
        """The engine sent more of the answer (it is alive, whatever its scrapes say)."""
        self.host.books.answered[engine.name] = time.monotonic()

    def release(self, engine: EngineClient) -> None:
        """This engine's part is over: stop counting against it and let a waiting request in."""
        self.host.core.release(self.ticket, engine.name, time.monotonic())

    # -- taken back before its first byte (syshaxd.core.revoke) ---------------------------

    def when_revoked(self, stop: Callable[[ApiError], None]) -> None:
        """Call ``stop`` (once) if the core takes it back before its first byte; at once if it has.
        Dispatch registers how to stop what runs now (the relay of its engine's answer)."""
        if self.revoked is not None:
            stop(self.revoked)
        else:
            self._stop = stop

    def revoke(self, error: ApiError) -> None:
        """The core took back its engine before the client had a byte: stop the engine's answer;
        the client gets ``error``."""
        self.revoked = error
        stop, self._stop = self._stop, None
        if stop is not None:
            stop(error)

    # -- asking the core ---------------------------------------------------------------

    async def reask(self, features: RequestFeatures) -> Decision:
        """See :meth:`reask_now`."""
        return self.reask_now(features)

    def reask_now(self, features: RequestFeatures) -> Decision:
        """The policy's decision for the request now, mid-way (the CPU stopped at its token limit)."""
        return self.host.core.reask(features, time.monotonic())

    async def resubmit(self, failed: EngineClient) -> EngineClient | None:
        """See :meth:`take_other`."""
        return self.take_other(failed)

    def take_other(self, failed: EngineClient) -> EngineClient | None:
        """Once per request: an engine on the other device, reserved, for an engine that failed
        before the client saw a byte; None when already resubmitted or none is usable."""
        name = self.host.core.take_other(self.ticket, failed.name, time.monotonic())
        if name is None:
            return None
        other = self.host.engine(name)
        self.host.books.stats.record_resubmit()
        self.rerouted(other, f"resubmitted: {failed.name} failed")
        return other

    def rerouted(self, engine: EngineClient, why: str) -> None:
        """The whole request now runs on ``engine``: the recorded decision says so, and why."""
        if self.decision is not None:
            self.decision = self.decision.model_copy(update={
                "device": engine.device, "mode": Mode.WHOLE.value, "engine": engine.name,
                "reason": f"{why}; {self.decision.reason}"})
        self.placed(self.features.level.name, engine.device, engine.name, Mode.WHOLE.value, why)

    # -- the end -----------------------------------------------------------------------

    def finish(self, outcome: str, tally: Tally | None = None) -> None:
        """The request ended (any way): release everything, record it once, log one line.

        ``tally``: the answer's token counts and times as the client got them; its first token
        is the request's TTFT (else the engine's first byte is).
        """
        if self.finished:
            return
        self.finished = True
        books = self.host.books
        now = time.monotonic()
        e2e = now - self.ticket.arrived
        tally = tally if tally is not None else Tally()
        if tally.first_token is not None:
            self.ttft = max(0.0, tally.first_token - self.ticket.arrived)
        tokens = tally.output_tokens
        if self.decision is not None:
            self.decision = books.stats.record_finish(self.decision, outcome, self.ttft, e2e)
        else:  # never placed: refused, or timed out in line
            books.stats.record_unrouted(outcome)
        self._log(outcome, e2e, tokens)
        self._keep(outcome, e2e, tally)
        if self.span is not NO_SPAN:
            self._end_span(outcome, tokens, tally.prompt_tokens)
        books.closed(self)
        self.host.core.finish(self.ticket, now)

    def _keep(self, outcome: str, e2e: float, tally: Tally) -> None:
        parsed, ticket = self.parsed, self.ticket
        limits: Limits = ticket.limits or limits_for(self.host.core.inputs.limits(), ticket.features)
        gpu = cpu = 0.0
        for name, share in ticket.shares.items():
            cores = self.host.cores.get(name, 1)
            if self.host.engine(name).device == "gpu":
                gpu += share * cores
            else:
                cpu += share * cores
        prompt = tally.prompt_tokens if tally.prompt_tokens is not None else ticket.features.prompt_tokens
        record = Record(
            self.request_id, time.time() - e2e, parsed.kind, parsed.stream, prompt,
            ticket.features.max_tokens, tally.output_tokens, outcome, self.decision, ticket.seen, ticket.limits,
            ticket.decided - ticket.arrived if ticket.decided is not None else None, self.ttft, e2e,
            ticket.features.level.name, limits.ttft_target, limits.tpot_target, gpu, cpu,
            output_source=tally.output_source, prompt_source=tally.prompt_source or "estimate", decode=tally.decode,
            choices=parsed.n, longest=tally.longest, probe=parsed.probe, api_key_name=parsed.api_key_name,
            refused=self.refused)
        if not self.host.books.records.add(record):
            self.host.books.stats.record_probe()
        self.host.books.stats.record_class(record.service_class, outcome, record.met(record.tpot()))

    def _end_span(self, outcome: str, tokens: int | None, prompt: int | None) -> None:
        d, ticket = self.decision, self.ticket
        self.span.end({
            "gen_ai.usage.input_tokens": prompt if prompt is not None else self.features.prompt_tokens, "gen_ai.usage.output_tokens": tokens,
            "gen_ai.request.max_tokens": self.features.max_tokens, "syshax.class": self.features.level.name,
            "syshax.device": d.device if d else None, "syshax.engine": d.engine if d else None,
            "syshax.mode": d.mode if d else None, "syshax.reason": d.reason if d else None,
            "syshax.queued_s": ticket.decided - ticket.arrived if ticket.decided is not None else None,
            "syshax.ttft_s": self.ttft, "syshax.outcome": outcome, "syshax.request_id": self.request_id,
        }, error=None if outcome == "ok" else outcome)

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
