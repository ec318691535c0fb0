"""The conductor: admission, routing through the policy, accounting, and the request's end.

How an answer is produced (direct pass-through or a prefill/decode split) lives in
:mod:`syshaxd.conductor.dispatch`; this module decides where a request runs and keeps the books.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Protocol

from syshaxd.conductor.admission import AdmissionQueue
from syshaxd.conductor.flight import Flight
from syshaxd.conductor.stats import Stats
from syshaxd.config import Config, engine_specs
from syshaxd.engines.client import Upstream
from syshaxd.errors import ApiError
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, Limits, Mode, Policy, RequestFeatures
from syshaxd.schema import ConductorStatsModel, DecisionModel
from syshaxd.service.vitals import Vitals
from syshaxd.snapshot import Device, EngineState, EngineView, Snapshot

log = logging.getLogger("syshaxd.conductor")
access_log = logging.getLogger("syshaxd.access")


class SnapshotSource(Protocol):
    """What the conductor needs from the monitor."""

    def snapshot(self) -> Snapshot:
        """The latest immutable snapshot."""
        ...


class RuntimeSource(Protocol):
    """What the conductor needs from the runtime config holder."""

    @property
    def policy_name(self) -> str:
        """The active policy's name."""
        ...

    def limits(self) -> Limits:
        """The decider's current limits."""
        ...

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        """(enabled, draining) of an engine."""
        ...


class EventSink(Protocol):
    """Where decision events go (the control API's event bus)."""

    def publish(self, event: str, data: Any) -> None:
        """Send one event to every subscriber without blocking."""
        ...


@dataclass(frozen=True)
class Route:
    """A routing decision with the engines reserved for it."""

    decision: Decision
    engines: tuple[Upstream, ...]  # one for whole, (gpu, cpu) for a split


class Conductor:
    """Routes requests to engines and accounts for every one of them."""

    def __init__(
        self,
        *,
        config: Config,
        runtime: RuntimeSource,
        monitor: SnapshotSource,
        bus: EventSink | None = None,
    ) -> None:
        self.config = config
        self.runtime = runtime
        self.monitor = monitor
        self.bus = bus
        self.upstreams = {spec.name: Upstream.create(spec) for spec in engine_specs(config)}
        self.handoff = config.services.gpu.handoff
        self.queue: AdmissionQueue[Route | ApiError] = AdmissionQueue(config.system.max_queue_size)
        self.counters = Stats()
        self.vitals = Vitals(self.counters.registry, busy=self.busy,
                             served=lambda: self.counters.requests_total)
        self.accepting = True
        self._policies: dict[str, Policy] = {}
        self._kicker: asyncio.Task[None] | None = None
        self._flights: set[Flight] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing: set[asyncio.Task[Any]] = set()
        from syshaxd.conductor.dispatch import Dispatcher

        self.dispatcher = Dispatcher(self)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background task that lets queued requests in as capacity appears."""
        self._kicker = asyncio.create_task(self._kick_loop(), name="syshax-admission")
        self.vitals.start()

    async def stop(self, grace: float) -> None:
        """Stop admitting, let in-flight requests finish for up to ``grace`` s, then cut them."""
        self.accepting = False
        self.queue.fail_all(ApiError(503, "syshaxd is shutting down", type="service_unavailable"))
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except asyncio.TimeoutError:
            log.warning("%d requests still running after %.0f s of grace: cutting them", len(self._flights), grace)
        if self._kicker:
            self._kicker.cancel()
        await self.vitals.stop()
        for up in self.upstreams.values():
            await up.aclose()  # ends any stream still open; its handler releases what it holds

    async def _kick_loop(self) -> None:
        # Scrapes and config changes can create capacity without a request finishing.
        while True:
            await asyncio.sleep(0.1)
            try:
                self.queue.kick()
            except Exception:  # a policy bug must not stop admission for good
                log.exception("admission kick failed")

    def close_later(self, coro: Any) -> None:
        """Run a cleanup coroutine without awaiting it (safe inside a cancelled task)."""
        task = asyncio.ensure_future(coro)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- what the policy sees --------------------------------------------------------

    def live_snapshot(self) -> Snapshot:
        """The monitor's snapshot merged with engine flags and the conductor's own counts."""
        snap = self.monitor.snapshot()
        seen = {e.name: e for e in snap.engines}
        engines = []
        for name, up in self.upstreams.items():
            view = seen.get(name) or EngineView(name, up.spec.device, up.spec.url, up.spec.dialect)
            enabled, draining = self.runtime.engine_flags(name)
            engines.append(
                replace(view, enabled=enabled, draining=draining, inflight=up.inflight, scheduled=up.scheduled,
                        inflight_decode_tokens=up.decode_tokens, scheduled_prompt_tokens=up.prompt_tokens)
            )
        return replace(snap, engines=tuple(engines))

    def policy(self) -> Policy:
        """The active policy (instances are kept: round-robin has a cursor)."""
        name = self.runtime.policy_name
        if name not in self._policies:
            from syshaxd.policy import get_policy

            self._policies[name] = get_policy(name)
        return self._policies[name]

    # -- routing ---------------------------------------------------------------------

    def _pick(self, snap: Snapshot, device: Device, preferred: str | None = None) -> Upstream | None:
        # The policy's choice if it named a usable engine, else the same least-loaded rule
        # the policies use (one notion of "least loaded" for the whole daemon).
        from syshaxd.policy import pick_engine

        if preferred:
            for view in snap.usable(device):
                if view.name == preferred:
                    return self.upstreams[view.name]
        best = pick_engine(snap, device)
        return self.upstreams[best.name] if best is not None else None

    def _down_message(self, snap: Snapshot) -> str:
        parts = []
        for view in snap.engines:
            why = "disabled" if not view.enabled else "draining" if view.draining else view.state.value
            if view.state is EngineState.DOWN and view.last_error:
                why += f" ({view.last_error})"
            parts.append(f"{view.name} ({view.device}) is {why}")
        return "no engine can take requests: " + "; ".join(parts)

    def try_route(self, flight: Flight) -> Route | ApiError | None:
        """Ask the policy and reserve engines; None means wait for capacity."""
        snap = self.live_snapshot()
        decision = self.policy()(snap, flight.features, self.runtime.limits())
        if flight.forced_mode is Mode.PD_SPLIT and decision.device is not None:
            decision = replace(decision, device="cpu", mode=Mode.PD_SPLIT,
                               reason=f"pd_disagg requested; policy said: {decision.reason}")
        if decision.device is None:
            if not snap.usable("gpu") and not snap.usable("cpu"):
                return ApiError(503, self._down_message(snap), type="service_unavailable")
            return None
        engines = self._engines_for(snap, decision)
        if engines is None:
            other: Device = "cpu" if decision.device == "gpu" else "gpu"
            up = self._pick(snap, other)
            if up is None:
                return ApiError(503, self._down_message(snap), type="service_unavailable")
            decision = replace(decision, device=other, mode=Mode.WHOLE, engine=None,
                               reason=f"{decision.device} unavailable, using {other}: {decision.reason}")
            engines = (up,)
        for up in engines:
            flight.reserve(up)
        self._record(flight, decision, engines)
        return Route(decision, engines)

    def _engines_for(self, snap: Snapshot, decision: Decision) -> tuple[Upstream, ...] | None:
        if decision.mode is Mode.PD_SPLIT:
            gpu, cpu = self._pick(snap, "gpu"), self._pick(snap, "cpu", decision.engine)
            if gpu is not None and cpu is not None:
                return (gpu, cpu)
            return None
        assert decision.device is not None
        up = self._pick(snap, decision.device, decision.engine)
        return (up,) if up is not None else None

    def _record(self, flight: Flight, decision: Decision, engines: tuple[Upstream, ...]) -> None:
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
        self.counters.record_decision(model)
        if self.bus is not None:
            self.bus.publish("decision", model)

    def reask(self, flight: Flight, features: RequestFeatures) -> Decision:
        """Ask the policy again mid-request (the CPU stopped at its token limit)."""
        return self.policy()(self.live_snapshot(), features, self.runtime.limits())

    def resubmit_target(self, flight: Flight, failed: Upstream) -> Upstream | None:
        """An engine on the other device for a request whose engine failed before any byte."""
        if flight.resubmitted:
            return None
        snap = self.live_snapshot()
        other: Device = "cpu" if failed.spec.device == "gpu" else "gpu"
        up = self._pick(snap, other)
        if up is None:
            return None
        flight.resubmitted = True
        flight.reserve(up)
        self.counters.resubmits_total += 1
        self.counters.m_resubmits.inc()
        if flight.decision is not None:
            flight.decision = flight.decision.model_copy(
                update={"device": other, "mode": "whole", "engine": up.name,
                        "reason": f"resubmitted: {failed.name} failed; {flight.decision.reason}"}
            )
        return up

    # -- a request from start to end -------------------------------------------------

    def new_flight(self, parsed: ParsedRequest, forced_mode: Mode | None = None) -> Flight:
        """Start accounting for a request."""
        request_id = uuid.uuid4().hex[:16]
        features = RequestFeatures(
            prompt_tokens=parsed.prompt_tokens,
            max_tokens=parsed.max_tokens,
            stream=parsed.stream,
            forced_mode=forced_mode,
            has_num_decode_tokens=parsed.has_num_decode_tokens,
            request_id=request_id,
        )
        flight = Flight(request_id, parsed, features, forced_mode,
                        deadline=time.monotonic() + self.config.system.request_timeout)
        self._flights.add(flight)
        self._idle.clear()
        return flight

    async def admit(self, flight: Flight) -> Route:
        """Wait for a route (429 when the queue is full, 504 after the request timeout)."""
        if not self.accepting:
            raise ApiError(503, "syshaxd is shutting down", type="service_unavailable")
        self.counters.m_queue.set(len(self.queue))
        try:
            routed = await asyncio.wait_for(self.queue.admit(lambda: self.try_route(flight)), flight.remaining())
        except asyncio.TimeoutError:
            raise ApiError(504, f"no capacity within system.request_timeout "
                           f"({self.config.system.request_timeout:g} s)", type="timeout") from None
        finally:
            self.counters.m_queue.set(len(self.queue))
        if isinstance(routed, ApiError):
            raise routed
        return routed

    def release(self, flight: Flight, up: Upstream) -> None:
        """An engine's part of a request is over; let a waiting request in."""
        if flight.release(up):
            self.queue.kick()

    def finish(self, flight: Flight, outcome: str, tokens: int | None = None) -> None:
        """The request ended (any way): release everything, record it once, log one line."""
        if flight.finished:
            return
        flight.finished = True
        if flight.on_finish is not None:
            flight.on_finish()
        if flight.release_all():
            self.queue.kick()
        self._flights.discard(flight)
        if not self._flights:
            self._idle.set()
        e2e = time.monotonic() - flight.t0
        if flight.decision is not None:
            flight.decision = self.counters.record_finish(flight.decision, outcome, flight.ttft, e2e)
        else:  # never routed: rejected, or timed out in the queue
            self.counters.record_unrouted(outcome)
        d = flight.decision
        access_log.info(
            "request id=%s kind=%s device=%s mode=%s engine=%s outcome=%s ttft=%s e2e=%.3f "
            "prompt_tokens~%d max_tokens=%d tokens=%s reason=%r",
            flight.request_id, flight.parsed.kind, d.device if d else None, d.mode if d else None,
            d.engine if d else None, outcome, f"{flight.ttft:.3f}" if flight.ttft is not None else "-",
            e2e, flight.features.prompt_tokens, flight.features.max_tokens,
            tokens if tokens is not None else "-", d.reason if d else "",
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request id=%s body=%s", flight.request_id, flight.parsed.raw[:2000].decode("utf-8", "replace"))

    # -- reporting -------------------------------------------------------------------

    def busy(self) -> bool:
        """Whether any request is in flight or queued."""
        return bool(self._flights) or len(self.queue) > 0

    def inflight(self) -> dict[str, int]:
        """In-flight requests per engine."""
        return {name: up.inflight for name, up in self.upstreams.items()}

    def recent_decisions(self) -> list[DecisionModel]:
        """The most recent routing decisions, oldest first."""
        return list(self.counters.decisions)

    def stats_model(self) -> ConductorStatsModel:
        """The conductor's counters for the control API."""
        p50, p99 = self.counters.ttft_quantiles()
        lag_p99, lag_max = self.vitals.lag.quantiles()
        for name, up in self.upstreams.items():
            self.counters.m_inflight.labels(name).set(up.inflight)
        self.counters.m_queue.set(len(self.queue))
        return ConductorStatsModel(
            queue_depth=len(self.queue),
            queue_limit=self.queue.max_size,
            inflight=self.inflight(),
            requests_total=self.counters.requests_total,
            requests_per_s=self.counters.requests_per_s(),
            ttft_p50=p50,
            ttft_p99=p99,
            decisions=dict(self.counters.by_route),
            reasons=dict(self.counters.by_reason.most_common(20)),
            outcomes=dict(self.counters.by_outcome),
            resubmits_total=self.counters.resubmits_total,
            decision_accuracy=self.counters.accuracy(),
            policy=self.runtime.policy_name,
            auto_pd_offload=self.runtime.limits().auto_pd_offload,
            loop_lag_p99=lag_p99,
            loop_lag_max=lag_max,
        )

    def stats(self) -> ConductorStatsModel:
        """The conductor's counters (the name the daemon uses)."""
        return self.stats_model()
