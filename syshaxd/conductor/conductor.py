"""The conductor: the daemon's driver of the scheduling core, and the books every request runs on.

It turns requests into the core's tickets and real events into the core's calls, with
``time.monotonic()`` as the clock (:mod:`syshaxd.core` decides); it makes the
:class:`~syshaxd.conductor.flight.Flight` that carries each request. How the answer is
produced (pass-through or a prefill/decode split) is the dispatcher's
(:mod:`syshaxd.conductor.dispatch`), which talks to the flight from then on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from syshaxd.conductor.books import Books
from syshaxd.conductor.boxload import BoxLoad, VllmGauges, box_load
from syshaxd.conductor.flight import BookedFlight
from syshaxd.conductor.levels import level_of
from syshaxd.conductor.records import RequestLog
from syshaxd.conductor.sources import CoreInputs, EventSink, RuntimeSource, SnapshotSource
from syshaxd.conductor.stats import Stats
from syshaxd.conductor.tracing import Tracing
from syshaxd.config import Config
from syshaxd.core import EngineBook, Outcome, Placement, Refusal, Scheduler
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError
from syshaxd.policy import solo_tpot
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, Mode, RequestFeatures
from syshaxd.schema import ClassStatsModel, ConductorStatsModel, DecisionModel, RequestRecordModel
from syshaxd.snapshot import EngineState, Snapshot

log = logging.getLogger("syshaxd.conductor")

#: OpenAI error type of each refusal reason of the core.
REFUSAL_TYPES = {"queue_full": "rate_limit_exceeded", "queue_timeout": "timeout"}


@dataclass(frozen=True)
class Route:
    """A placement with the engine clients it holds."""

    decision: Decision
    engines: tuple[EngineClient, ...]  # one for whole, (gpu, cpu) for a split
    service_class: str = ""  # the class it runs in
    priority: int | None = None  # the class's priority to send the engines (service.forward_priority)
    trace: dict[str, str] = field(default_factory=dict)  # a worker's: the daemon's span, the engines' parent


def api_error(refusal: Refusal, service_class: str | None = None) -> ApiError:
    """A refusal of the core as the client sees it: the reason also machine-readable, in
    ``x-syshax-refused-reason`` (as GAIE's ``x-llm-d-request-dropped-reason``)."""
    headers = {"x-syshax-refused-reason": refusal.reason}
    if service_class:
        headers["x-syshax-class"] = service_class
    if refusal.retry_after is not None:
        headers["Retry-After"] = str(refusal.retry_after)
    return ApiError(refusal.status, refusal.message, type=REFUSAL_TYPES.get(refusal.reason, "service_unavailable"),
                    headers=headers)


class Conductor:
    """Routes requests to engines through the core and accounts for every one of them."""

    def __init__(
        self,
        *,
        config: Config,
        runtime: RuntimeSource,
        monitor: SnapshotSource,
        engines: Mapping[str, EngineClient],
        bus: EventSink | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.runtime = runtime
        #: One span per request when ``logging.otlp_endpoint`` is set (:mod:`syshaxd.conductor.tracing`).
        self.tracing = tracing or Tracing(None)
        self.monitor = monitor
        self.bus = bus
        self.request_timeout = config.system.request_timeout
        self._engines = dict(engines)
        #: What an engine-second costs: 1 GPU-second on a GPU engine, its cores on a CPU one.
        cpu_cores = config.services.cpu.cores or os.cpu_count() or 1
        self.cores = {name: 1 if c.device == "gpu" else cpu_cores for name, c in self._engines.items()}
        self._inputs = CoreInputs(runtime, monitor)
        self.core = Scheduler(
            (EngineBook(c.name, c.device, c.spec.url, c.spec.dialect) for c in self._engines.values()),
            self._inputs, queue_limit=config.system.max_queue_size, request_timeout=self.request_timeout)
        kept = config.logging
        self.books = Books(Stats(), RequestLog(kept.requests_kept, kept.requests_file, kept.requests_file_bytes,
                                               kept.requests_file_backups))
        #: Why the whole box is draining (``syshax drain``, SIGTERM), or None: ``/health``
        #: answers 503 from then on while what arrives is still served until the stop.
        self.box_draining: str | None = None
        self.vllm_gauges = VllmGauges(self.books.stats.registry, config.models.default)
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = 0.0
        self.books.stats.queue_by_class = self.queue_by_class

    def queue_by_class(self) -> dict[str, int]:
        """Requests waiting in line now, by service class."""
        return dict(Counter(ticket.features.level.name for ticket in self.core.line.waiting()))

    @property
    def accepting(self) -> bool:
        """Whether new requests are admitted (False once stopping)."""
        return self.core.accepting

    # -- lifecycle -------------------------------------------------------------------

    async def stop(self, grace: float) -> None:
        """Stop admitting and let in-flight requests finish for up to ``grace`` s.

        What is still running afterwards ends when the engine clients close (the service's
        next step): each handler sees its stream break and releases what it holds.
        """
        self.core.stop()
        if self._expiry is not None:
            self._expiry.cancel()
        try:
            await asyncio.wait_for(self.books.wait_idle(), grace)
        except asyncio.TimeoutError:
            log.warning("%d requests still running after %.0f s of grace: cutting them", self.books.open_count, grace)

    def kick(self) -> None:
        """Something the policy reads changed (a scrape landed, the config changed): waiting
        requests may be let in. A request ending makes room through the core without this."""
        try:
            self._inputs.refresh()
            self.core.changed()
            self.core.kick(time.monotonic())
        except Exception:  # a policy bug must not stop admission for good
            log.exception("admission kick failed")

    # -- what the policy sees --------------------------------------------------------

    def live_snapshot(self) -> Snapshot:
        """The monitor's snapshot merged with engine flags and the core's own counts."""
        return self.core.snapshot(time.monotonic())

    def fastest_tpot(self) -> dict[str, float]:
        """Each engine's seconds per token for one request alone, from what it measured (the
        policy's model of it); engines that measured nothing are left out."""
        return {view.name: solo_tpot(view) for view in self.live_snapshot().engines
                if view.metrics.tpot_recent is not None}

    def engine(self, name: str) -> EngineClient:
        """The engine client of a name."""
        return self._engines[name]

    def engines_by_name(self) -> dict[str, EngineClient]:
        """Every engine the conductor routes to, by name."""
        return dict(self._engines)

    # -- a request from start to end -------------------------------------------------

    def new_flight(self, parsed: ParsedRequest, forced_mode: Mode | None = None,
                   request_id: str | None = None, process: str = "0", age: float = 0.0) -> BookedFlight:
        """Start accounting for a request: a flight around a new ticket of the core.

        ``request_id`` is the client's ``X-Request-ID`` when it sent one; else one is made.
        ``process`` is the API process that took it (a worker's number, or 0: this one);
        ``age`` the seconds it spent there before it reached the conductor.
        """
        service, levels = self._inputs.service()
        level = level_of(service, levels, parsed)
        self.books.stats.taken(process)
        request_id = request_id or os.urandom(16).hex()
        features = RequestFeatures(
            prompt_tokens=parsed.prompt_tokens,
            max_tokens=parsed.max_tokens,
            stream=parsed.stream,
            forced_mode=forced_mode,
            has_num_decode_tokens=parsed.has_num_decode_tokens,
            request_id=request_id,
            level=level,
            n=parsed.n,
        )
        ticket = self.core.ticket(request_id, features, time.monotonic(), age)
        flight = BookedFlight(request_id, parsed, ticket, self)
        if process == "0":
            # The core may take back its GPU slot before its first byte. Not a worker's request:
            # the worker may have sent that byte before the daemon's word reaches it.
            ticket.revoke = lambda refusal: self._revoked(flight, refusal)
        if service.forward_priority:
            flight.forward_priority = level.priority
        if self.tracing.enabled:
            flight.span = self.tracing.start("chat" if parsed.kind == "chat" else "text_completion", parsed.model,
                                             dict(parsed.trace), time.time_ns() - int(age * 1e9))
        self.books.opened(flight)
        return flight

    def try_admit(self, flight: BookedFlight) -> Route | None:
        """A route now, or None: the request waits in line (:meth:`admit` waits for it).

        Raises:
            ApiError: refused (429 line full, 503 stopping or no engine usable).
        """
        if flight.waiter is not None:
            return None
        outcome = self.core.arrive(flight.ticket, time.monotonic(), wake=lambda o: self._woken(flight, o))
        if outcome is None:
            flight.waiter = asyncio.get_running_loop().create_future()
            self.books.stats.m_queue.set(self.core.waiting)
            self._arm_expiry()
            return None
        return self._route(flight, outcome)

    async def admit(self, flight: BookedFlight) -> Route:
        """Wait for a route (429 when the line is full, 504 after the request timeout)."""
        routed_now = self.try_admit(flight)
        if routed_now is not None:
            return routed_now
        assert flight.waiter is not None
        try:
            outcome = await flight.waiter
        finally:
            self.core.withdraw(flight.ticket)  # a client that left mid-wait leaves the line
            self.books.stats.m_queue.set(self.core.waiting)
        return self._route(flight, outcome)

    def _woken(self, flight: BookedFlight, outcome: Outcome) -> None:
        if isinstance(outcome, Placement):
            self._record(flight, outcome)
        waiter = flight.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)

    def _revoked(self, flight: BookedFlight, refusal: Refusal) -> None:
        """The core took back ``flight``'s GPU slot before its first byte: its client gets the refusal."""
        level, flight.refused = flight.features.level.name, refusal.reason
        self.books.stats.record_refusal(level, refusal.reason)
        log.info("request %s (class %s) gave up its slot on %s before its first byte: a request that is not "
                 "sheddable needed room", flight.request_id, level, flight.decision.engine if flight.decision else "-")
        flight.revoke(api_error(refusal, level))

    def _route(self, flight: BookedFlight, outcome: Outcome) -> Route:
        if isinstance(outcome, Refusal):
            self.books.stats.record_refusal(flight.features.level.name, outcome.reason)
            flight.refused = outcome.reason
            raise api_error(outcome, flight.features.level.name)
        if flight.decision is None:
            self._record(flight, outcome)
        return Route(outcome.decision, tuple(self._engines[name] for name in outcome.engines),
                     flight.features.level.name, flight.forward_priority)

    def _arm_expiry(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is None or (self._expiry is not None and self._expiry_at <= deadline):
            return
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_at = deadline
        self._expiry = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), self._expire)

    def _expire(self) -> None:
        self._expiry = None
        self.core.expire(time.monotonic())
        self._arm_expiry()

    def _record(self, flight: BookedFlight, placement: Placement) -> None:
        decision = placement.decision
        model = DecisionModel(
            time=time.time(),
            request_id=flight.request_id,
            device=decision.device,
            mode=decision.mode.value,
            engine="+".join(placement.engines),
            reason=decision.reason,
            policy=self.runtime.policy_name,
            token_limit=decision.token_limit,
            prompt_tokens=flight.features.prompt_tokens,
            max_tokens=flight.features.max_tokens,
            est_ttft=decision.est_ttft,
            est_e2e=decision.est_e2e,
            held=flight.ticket.held if placement.waited else None,
            service_class=flight.features.level.name,
        )
        flight.decision = model
        self.books.stats.record_decision(model)
        if self.bus is not None:
            self.bus.publish("decision", model)

    # -- requests the core does not place (pass-through) --------------------------------

    async def passthrough_engines(self) -> list[EngineClient]:
        """See :meth:`passthrough_order` (awaitable, as a worker's must be)."""
        return self.passthrough_order()

    def passthrough_order(self) -> list[EngineClient]:
        """Engines to try for a route the conductor does not route itself, best first: the GPU's
        usable engines, least loaded first, then the CPU's.

        Raises:
            ApiError: 503 when no engine can take requests.
        """
        found = self.core.passthrough_order(time.monotonic())
        if isinstance(found, Refusal):
            raise api_error(found)
        return [self._engines[name] for name in found]

    def hold(self, engine: EngineClient) -> object:
        """Count a pass-through request against ``engine``; returns the token :meth:`unhold` takes."""
        if not self.accepting:
            raise ApiError(503, "syshaxd is shutting down", type="service_unavailable")
        token = object()
        self.core.hold(engine.name, time.monotonic())
        self.books.opened(token)  # the daemon's drain waits for it
        return token

    def unhold(self, engine: EngineClient, token: object) -> None:
        """A pass-through request on ``engine`` is over."""
        self.books.closed(token)
        self.core.unhold(engine.name, time.monotonic())

    # -- reporting -------------------------------------------------------------------

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry of the conductor's metrics (the service adds its own)."""
        return self.books.stats.registry

    def busy(self) -> bool:
        """Whether any request is in flight or queued."""
        return self.books.open_count > 0 or self.core.waiting > 0

    def served(self) -> int:
        """Requests routed so far."""
        return self.books.stats.requests_total

    def answered_at(self, name: str) -> float | None:
        """When engine ``name`` last sent answer bytes (time.monotonic()), if ever."""
        return self.books.answered_at(name)

    def inflight(self) -> dict[str, int]:
        """In-flight requests per engine."""
        return self.core.ledger.inflight()

    def recent_requests(self, limit: int | None = None) -> list[RequestRecordModel]:
        """The last finished requests (``logging.requests_kept`` at most), oldest first."""
        return self.books.records.models(limit)

    def recent_decisions(self) -> list[DecisionModel]:
        """The most recent routing decisions, oldest first."""
        return list(self.books.stats.decisions.values())

    def stats_model(self, loop_lag: tuple[float | None, float | None] = (None, None)) -> ConductorStatsModel:
        """The conductor's counters for the control API (``loop_lag``: the daemon's p99 and max)."""
        stats = self.books.stats
        p50, p99 = stats.ttft_quantiles()
        inflight = self.inflight()
        for name, count in inflight.items():
            stats.m_inflight.labels(name).set(count)
        stats.m_queue.set(self.core.waiting)
        return ConductorStatsModel(
            queue_depth=self.core.waiting,
            queue_limit=self.core.line.limit,
            inflight=inflight,
            requests_total=stats.requests_total,
            requests_per_s=stats.requests_per_s(),
            ttft_p50=p50,
            ttft_p99=p99,
            decisions=dict(stats.by_route),
            reasons=dict(stats.by_reason.most_common(20)),
            outcomes=dict(stats.by_outcome),
            resubmits_total=stats.resubmits_total,
            probe_requests_total=stats.probe_requests_total,
            decision_accuracy=stats.accuracy(),
            policy=self.runtime.policy_name,
            auto_pd_offload=self.runtime.limits().auto_pd_offload,
            loop_lag_p99=loop_lag[0],
            loop_lag_max=loop_lag[1],
            box_draining=self.box_draining,
            classes={name: ClassStatsModel(waiting=waiting, finished_per_s=done, goodput_per_s=good)
                     for name, (waiting, done, good) in stats.by_class().items()},
        )

    def box_load(self) -> BoxLoad:
        """The whole box's load as a cluster router sees it (:mod:`syshaxd.conductor.boxload`)."""
        return box_load(self.live_snapshot(), self.core.waiting)

    def exposition(self) -> bytes:
        """Prometheus text of the conductor's metrics (and whatever else shares its registry)."""
        stats = self.books.stats
        self.vllm_gauges.update(self.box_load())
        for view in self.live_snapshot().engines:
            for state in EngineState:
                stats.m_engine_state.labels(view.name, state.value).set(1.0 if view.state is state else 0.0)
        for name, count in self.inflight().items():
            stats.m_inflight.labels(name).set(count)
        stats.m_queue.set(self.core.waiting)
        return stats.exposition()

