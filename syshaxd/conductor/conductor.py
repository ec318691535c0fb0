"""The conductor: admission, routing through the policy, and the books every request runs on.

It decides where a request runs and makes the :class:`~syshaxd.conductor.flight.Flight`
that carries it; how the answer is produced (pass-through or a prefill/decode split) is the
dispatcher's (:mod:`syshaxd.conductor.dispatch`), which talks to the flight from then on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry

from syshaxd.conductor.admission import AdmissionQueue
from syshaxd.conductor.books import Books
from syshaxd.conductor.boxload import BoxLoad, VllmGauges, box_load
from syshaxd.conductor.flight import BookedFlight
from syshaxd.conductor.records import RequestLog
from syshaxd.conductor.sources import EventSink, RuntimeSource, SnapshotSource
from syshaxd.conductor.stats import Stats
from syshaxd.config import Config
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError
from syshaxd.policy import get_policy, pick_engine, queue_order
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, Mode, Policy, RequestFeatures
from syshaxd.schema import ConductorStatsModel, DecisionModel, RequestRecordModel
from syshaxd.snapshot import Device, EngineState, Snapshot

log = logging.getLogger("syshaxd.conductor")
#: Seconds since arrival past which a request counts as having waited for its route.
WAITED_MIN = 0.001


@dataclass(frozen=True)
class Route:
    """A routing decision with the engines reserved for it."""

    decision: Decision
    engines: tuple[EngineClient, ...]  # one for whole, (gpu, cpu) for a split


class Conductor:
    """Routes requests to engines and accounts for every one of them."""

    def __init__(
        self,
        *,
        config: Config,
        runtime: RuntimeSource,
        monitor: SnapshotSource,
        engines: Mapping[str, EngineClient],
        bus: EventSink | None = None,
    ) -> None:
        self.runtime = runtime
        self.monitor = monitor
        self.bus = bus
        self.request_timeout = config.system.request_timeout
        self._engines = dict(engines)
        kept = config.logging
        self.books = Books((client.spec for client in self._engines.values()), Stats(),
                           RequestLog(kept.requests_kept, kept.requests_file, kept.requests_file_bytes,
                                      kept.requests_file_backups))
        self.queue: AdmissionQueue[Route | ApiError] = AdmissionQueue(config.system.max_queue_size)
        self.books.on_release = self.queue.kick
        self.accepting = True
        #: Why the whole box is draining (``syshax drain``, SIGTERM), or None: ``/health``
        #: answers 503 from then on while what arrives is still served until the stop.
        self.box_draining: str | None = None
        self.vllm_gauges = VllmGauges(self.books.stats.registry, config.models.default)
        self._policies: dict[str, Policy] = {}

    # -- lifecycle -------------------------------------------------------------------

    async def stop(self, grace: float) -> None:
        """Stop admitting and let in-flight requests finish for up to ``grace`` s.

        What is still running afterwards ends when the engine clients close (the service's
        next step): each handler sees its stream break and releases what it holds.
        """
        self.accepting = False
        self.queue.fail_all(ApiError(503, "syshaxd is shutting down", type="service_unavailable"))
        try:
            await asyncio.wait_for(self.books.wait_idle(), grace)
        except asyncio.TimeoutError:
            log.warning("%d requests still running after %.0f s of grace: cutting them", self.books.open_count, grace)

    def kick(self) -> None:
        """Let waiting requests in if there is room now (a scrape landed, the config changed).

        A request ending makes room through the books without this; nothing polls.
        """
        try:
            self.queue.kick()
        except Exception:  # a policy bug must not stop admission for good
            log.exception("admission kick failed")

    # -- what the policy sees --------------------------------------------------------

    def live_snapshot(self) -> Snapshot:
        """The monitor's snapshot merged with engine flags and the conductor's own counts."""
        return self.books.merge(self.monitor.snapshot(), self.runtime.engine_flags)

    def policy(self) -> Policy:
        """The active policy (instances are kept: round-robin has a cursor)."""
        name = self.runtime.policy_name
        if name not in self._policies:
            self._policies[name] = get_policy(name)
        return self._policies[name]

    # -- routing ---------------------------------------------------------------------

    def _pick(self, snap: Snapshot, device: Device, preferred: str | None = None) -> EngineClient | None:
        # The policy's choice if it named a usable engine, else the same least-loaded rule
        # the policies use (one notion of "least loaded" for the whole daemon).
        if preferred:
            for view in snap.usable(device):
                if view.name == preferred:
                    return self._engines[view.name]
        best = pick_engine(snap, device)
        return self._engines[best.name] if best is not None else None

    def try_route(self, flight: BookedFlight) -> Route | ApiError | None:
        """Ask the policy and reserve engines; None means wait for capacity."""
        snap, limits = self.live_snapshot(), self.runtime.limits()
        features = flight.features
        waited = time.monotonic() - flight.t0
        if waited > WAITED_MIN:  # asked again from the queue: the policy counts the wait
            features = replace(features, waited=waited)
        decision = self.policy()(snap, features, limits)
        if flight.forced_mode is Mode.PD_SPLIT and decision.device is not None:
            decision = replace(decision, device="cpu", mode=Mode.PD_SPLIT,
                               reason=f"pd_disagg requested; policy said: {decision.reason}")
        if decision.device is None:
            if not snap.usable("gpu") and not snap.usable("cpu"):
                return ApiError(503, _down_message(snap), type="service_unavailable")
            return None
        engines = self._engines_for(snap, decision)
        if engines is None:
            other: Device = "cpu" if decision.device == "gpu" else "gpu"
            up = self._pick(snap, other)
            if up is None:
                return ApiError(503, _down_message(snap), type="service_unavailable")
            decision = replace(decision, device=other, mode=Mode.WHOLE, engine=None,
                               reason=f"{decision.device} unavailable, using {other}: {decision.reason}")
            engines = (up,)
        for up in engines:
            flight.reserve(up)
        flight.seen, flight.limits, flight.decided = snap, limits, time.monotonic()
        self._record(flight, decision, engines)
        return Route(decision, engines)

    def _engines_for(self, snap: Snapshot, decision: Decision) -> tuple[EngineClient, ...] | None:
        if decision.mode is Mode.PD_SPLIT:
            gpu, cpu = self._pick(snap, "gpu"), self._pick(snap, "cpu", decision.engine)
            return (gpu, cpu) if gpu is not None and cpu is not None else None
        assert decision.device is not None
        up = self._pick(snap, decision.device, decision.engine)
        return (up,) if up is not None else None

    def _record(self, flight: BookedFlight, decision: Decision, engines: tuple[EngineClient, ...]) -> None:
        model = DecisionModel(
            time=time.time(),
            request_id=flight.request_id,
            device=decision.device,
            mode=decision.mode.value,
            engine="+".join(up.name for up in engines),
            reason=decision.reason,
            policy=self.runtime.policy_name,
            token_limit=decision.token_limit,
            prompt_tokens=flight.features.prompt_tokens,
            max_tokens=flight.features.max_tokens,
            est_ttft=decision.est_ttft,
            est_e2e=decision.est_e2e,
        )
        flight.decision = model
        self.books.stats.record_decision(model)
        if self.bus is not None:
            self.bus.publish("decision", model)

    # -- what a flight may ask mid-request (flight.Router) -----------------------------

    def reask(self, features: RequestFeatures) -> Decision:
        """Ask the policy again mid-request (the CPU stopped at its token limit)."""
        return self.policy()(self.live_snapshot(), features, self.runtime.limits())

    def other_engine(self, failed: EngineClient) -> EngineClient | None:
        """A usable engine on the other device, for a request whose engine failed before any byte."""
        other: Device = "cpu" if failed.device == "gpu" else "gpu"
        return self._pick(self.live_snapshot(), other)

    def engines_by_name(self) -> dict[str, EngineClient]:
        """Every engine the conductor routes to, by name."""
        return dict(self._engines)

    async def passthrough_engines(self) -> list[EngineClient]:
        """See :meth:`passthrough_order` (awaitable, as a worker's must be)."""
        return self.passthrough_order()

    def passthrough_order(self) -> list[EngineClient]:
        """Engines to try for a route the conductor does not route itself, best first: the GPU's
        usable engines, least loaded first, then the CPU's.

        Raises:
            ApiError: 503 when no engine can take requests.
        """
        snap = self.live_snapshot()
        found = [self._engines[view.name] for device in ("gpu", "cpu")
                 for view in sorted(snap.usable(device), key=lambda v: (v.inflight, v.name))]
        if not found:
            raise ApiError(503, _down_message(snap), type="service_unavailable")
        return found

    def hold(self, engine: EngineClient) -> object:
        """Count a pass-through request against ``engine``; returns the token :meth:`unhold` takes."""
        if not self.accepting:
            raise ApiError(503, "syshaxd is shutting down", type="service_unavailable")
        token = object()
        self.books.hold(engine.name)
        self.books.opened(token)  # the daemon's drain waits for it
        return token

    def unhold(self, engine: EngineClient, token: object) -> None:
        """A pass-through request on ``engine`` is over."""
        self.books.closed(token)
        self.books.unhold(engine.name)

    # -- a request from start to end -------------------------------------------------

    def new_flight(self, parsed: ParsedRequest, forced_mode: Mode | None = None,
                   request_id: str | None = None, process: str = "0") -> BookedFlight:
        """Start accounting for a request: a flight bound to the books.

        ``request_id`` is the client's ``X-Request-ID`` when it sent one; else one is made.
        ``process`` is the API process that took it (a worker's number, or 0: this one).
        """
        self.books.stats.taken(process)
        request_id = request_id or os.urandom(16).hex()
        features = RequestFeatures(
            prompt_tokens=parsed.prompt_tokens,
            max_tokens=parsed.max_tokens,
            stream=parsed.stream,
            forced_mode=forced_mode,
            has_num_decode_tokens=parsed.has_num_decode_tokens,
            request_id=request_id,
        )
        flight = BookedFlight(request_id, parsed, features, deadline=time.monotonic() + self.request_timeout,
                        books=self.books, router=self)
        self.books.opened(flight)
        return flight

    def try_admit(self, flight: BookedFlight) -> Route | None:
        """A route now, when nobody waits ahead and there is capacity; None means :meth:`admit`.

        Raises:
            ApiError: 503 when stopping or when no engine can take requests.
        """
        if not self.accepting:
            raise ApiError(503, "syshaxd is shutting down", type="service_unavailable")
        routed = self.queue.try_now(lambda: self.try_route(flight))
        if isinstance(routed, ApiError):
            raise routed
        return routed

    async def admit(self, flight: BookedFlight) -> Route:
        """Wait for a route (429 when the queue is full, 504 after the request timeout)."""
        routed_now = self.try_admit(flight)
        if routed_now is not None:
            return routed_now
        stats = self.books.stats
        stats.m_queue.set(len(self.queue))
        # The policy's queue order (adaptive: the oldest request still on time first) and target.
        self.queue.order = queue_order(self.runtime.policy_name)
        self.queue.ttft_target = self.runtime.limits().ttft_target
        try:
            routed = await asyncio.wait_for(self.queue.admit(lambda: self.try_route(flight)), flight.remaining())
        except asyncio.TimeoutError:
            raise ApiError(504, f"no capacity within system.request_timeout "
                           f"({self.request_timeout:g} s)", type="timeout") from None
        finally:
            stats.m_queue.set(len(self.queue))
        if isinstance(routed, ApiError):
            raise routed
        return routed

    # -- reporting -------------------------------------------------------------------

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry of the conductor's metrics (the service adds its own)."""
        return self.books.stats.registry

    def busy(self) -> bool:
        """Whether any request is in flight or queued."""
        return self.books.open_count > 0 or len(self.queue) > 0

    def served(self) -> int:
        """Requests routed so far."""
        return self.books.stats.requests_total

    def answered_at(self, name: str) -> float | None:
        """When engine ``name`` last sent answer bytes (time.monotonic()), if ever."""
        return self.books.answered_at(name)

    def inflight(self) -> dict[str, int]:
        """In-flight requests per engine."""
        return self.books.inflight()

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
        stats.m_queue.set(len(self.queue))
        return ConductorStatsModel(
            queue_depth=len(self.queue),
            queue_limit=self.queue.max_size,
            inflight=inflight,
            requests_total=stats.requests_total,
            requests_per_s=stats.requests_per_s(),
            ttft_p50=p50,
            ttft_p99=p99,
            decisions=dict(stats.by_route),
            reasons=dict(stats.by_reason.most_common(20)),
            outcomes=dict(stats.by_outcome),
            resubmits_total=stats.resubmits_total,
            decision_accuracy=stats.accuracy(),
            policy=self.runtime.policy_name,
            auto_pd_offload=self.runtime.limits().auto_pd_offload,
            loop_lag_p99=loop_lag[0],
            loop_lag_max=loop_lag[1],
            box_draining=self.box_draining,
        )

    def box_load(self) -> BoxLoad:
        """The whole box's load as a cluster router sees it (:mod:`syshaxd.conductor.boxload`)."""
        return box_load(self.live_snapshot(), len(self.queue))

    def exposition(self) -> bytes:
        """Prometheus text of the conductor's metrics (and whatever else shares its registry)."""
        stats = self.books.stats
        self.vllm_gauges.update(self.box_load())
        for view in self.live_snapshot().engines:
            for state in EngineState:
                stats.m_engine_state.labels(view.name, state.value).set(1.0 if view.state is state else 0.0)
        for name, count in self.inflight().items():
            stats.m_inflight.labels(name).set(count)
        stats.m_queue.set(len(self.queue))
        return stats.exposition()


def _down_message(snap: Snapshot) -> str:
    parts = []
    for view in snap.engines:
        why = "disabled" if not view.enabled else "draining" if view.draining else view.state.value
        if view.state is EngineState.DOWN and view.last_error:
            why += f" ({view.last_error})"
        parts.append(f"{view.name} ({view.device}) is {why}")
    return "no engine can take requests: " + "; ".join(parts)
