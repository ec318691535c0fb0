"""A virtual-time conductor: replays requests through simulated engines and a real policy.

The engines are :class:`syshaxd.sim.core.EngineCore` (the simulator's model core); the
policy is the function the live conductor runs. What the policy sees is built the way the
daemon builds it: a scrape every ``monitor.interval`` seconds (running, waiting, KV usage,
counters fed through the monitor's own :class:`RateTracker`), merged with the conductor's
live ``inflight``/``scheduled`` counts, and nothing else (the conductor does not fill
``inflight_decode_tokens``/``scheduled_prompt_tokens``, so neither does this).

The request path follows :mod:`syshaxd.dispatch` and :mod:`syshaxd.handoff`:
``None`` waits in a bounded FIFO admission queue (``system.max_queue_size``; full = 429),
retried whenever an engine releases a request or a scrape lands; ``system.request_timeout``
ends a request wherever it is (504). ``whole`` runs on one engine (a CPU token limit is
ignored, as the live pass-through does). ``pd_split`` prefills on the GPU and decodes on
the CPU per handoff: ``syshax`` — the GPU writes two tokens, the CPU continues on shared
KV in segments of ``token_limit`` tokens and the policy is asked again after each (its
device is not consulted, only its limit, as the live loop does); ``kv-transfer`` and
``llamacpp-slots`` — the GPU prefills, the KV moves over the link, the CPU writes every
token; ``recompute`` — the GPU writes one token, the CPU prefills prompt + token again.

This stands in for ``syshaxd/sim/runner.py`` (not yet in the tree when the benchmark was
written); see ``bench/_run.py``.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from bench._measure import Outcome
from bench._workloads import Request
from syshaxd.engines.rates import RateTracker
from syshaxd.policy.base import Decision, Limits, Mode, Policy, RequestFeatures
from syshaxd.sim import timing
from syshaxd.sim.core import EngineCore, SimRequest, StepResult
from syshaxd.sim.profile import Profile
from syshaxd.snapshot import Device, EngineMetrics, EngineState, EngineView, HistogramData, Snapshot

INF = math.inf


@dataclass
class Engine:
    """One simulated engine and what the conductor and the monitor know about it."""

    name: str
    device: Device
    core: EngineCore
    rates: RateTracker
    metrics: EngineMetrics = field(default_factory=EngineMetrics)
    inflight: int = 0
    scheduled: int = 0
    pending: StepResult | None = None  # computed, delivered at its end time
    stalled: bool = False  # nothing can run until a request arrives or leaves
    ttft_sum: float = 0.0
    ttft_count: int = 0
    tpot_sum: float = 0.0
    tpot_count: int = 0
    last_token: dict[str, float] = field(default_factory=dict)

    def next_time(self) -> float:
        """When this engine next needs attention (INF when idle or stalled)."""
        if self.pending is not None:
            return self.pending.end
        if self.stalled:
            return INF
        t = self.core.next_event_time()
        return INF if t is None else t

    def scrape(self, now: float) -> None:
        """What the monitor would read from /metrics now, with rates filled."""
        c = self.core.counters
        hist = (
            ("ttft", HistogramData((), float(self.ttft_count), self.ttft_sum)),
            ("tpot", HistogramData((), float(self.tpot_count), self.tpot_sum)),
        )
        raw = EngineMetrics(
            kv_cache_usage=self.core.kv_usage, running=self.core.num_running, waiting=self.core.num_waiting,
            swapped=self.core.num_swapped, preemptions_total=float(c.preemptions),
            prompt_tokens_total=float(c.prompt_tokens), generation_tokens_total=float(c.generation_tokens),
            requests_finished_total=float(sum(c.finished.values())), histograms=hist,
        )
        self.metrics = self.rates.update(raw, now)

    def view(self) -> EngineView:
        """The engine as the policy sees it (last scrape + the conductor's live counts)."""
        return EngineView(self.name, self.device, f"sim://{self.name}", "vllm-v1", state=EngineState.UP,
                          metrics=self.metrics, inflight=self.inflight, scheduled=self.scheduled)


@dataclass(eq=False)
class Flight:
    """One request inside the virtual conductor."""

    index: int
    req: Request
    features: RequestFeatures
    deadline: float
    decision: Decision | None = None
    first_token: float | None = None
    finished: float | None = None
    visible: int = 0  # tokens the client has received
    cpu_tokens: int = 0
    devices: set[Device] = field(default_factory=set)
    holds: set[str] = field(default_factory=set)  # engine names counted in inflight
    unstarted: set[str] = field(default_factory=set)  # engine names counted in scheduled
    rid: str | None = None  # the engine request running now
    engine: str | None = None
    segment: int = 0
    split_cpu: str | None = None  # the CPU engine reserved for the decode half
    hidden_first: bool = False  # kv-transfer: the GPU's token is not sent to the client
    outcome: str = "ok"  # ok, rejected (queue full), timeout

    @property
    def done(self) -> bool:
        """Finished, rejected or timed out."""
        return self.finished is not None or self.outcome != "ok"


@dataclass(frozen=True)
class VtimeResult:
    """Per-request outcomes, engine busy seconds and decision counts of one run."""

    outcomes: list[Outcome]
    busy: dict[Device, float]
    decisions: dict[str, int]
    rejected: int
    timed_out: int


class Conductor:
    """The virtual-time conductor over one GPU and/or one CPU engine."""

    def __init__(self, gpu: Profile | None, cpu: Profile | None, policy: Policy, limits: Limits, *,
                 interval: float = 1.0, max_queue: int = 100, timeout: float = 600.0, window: float = 5.0) -> None:
        self.engines: dict[str, Engine] = {}
        for name, device, profile in (("gpu0", "gpu", gpu), ("cpu0", "cpu", cpu)):
            if profile is not None:
                self.engines[name] = Engine(name, device, EngineCore(profile), RateTracker(window))  # type: ignore[arg-type]
        self.policy, self.limits = policy, limits
        self.interval, self.max_queue, self.timeout = interval, max_queue, timeout
        self.queue: deque[Flight] = deque()
        self.by_rid: dict[str, Flight] = {}
        self.flights: list[Flight] = []
        self.decisions: Counter[str] = Counter()
        self.now = 0.0
        self.deadlines: list[tuple[float, int]] = []
        self.open = 0  # requests arrived and not ended

    # -- what the policy sees ----------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The live snapshot: scraped metrics plus the conductor's in-flight counts."""
        return Snapshot(taken_at=self.now, engines=tuple(e.view() for e in self.engines.values()))

    def _pick(self, device: Device, preferred: str | None) -> Engine | None:
        usable = [e for e in self.engines.values() if e.device == device]
        for e in usable:
            if e.name == preferred:
                return e
        return min(usable, key=lambda e: (e.inflight + (e.metrics.waiting or 0), e.inflight, e.name), default=None)

    # -- routing -----------------------------------------------------------------------
    def _try_route(self, f: Flight) -> bool:
        decision = self.policy(self.snapshot(), f.features, self.limits)
        device = decision.device
        if device is None:
            return False
        if decision.mode is Mode.PD_SPLIT:
            gpu, cpu = self._pick("gpu", None), self._pick("cpu", decision.engine)
            if gpu is None or cpu is None:
                decision = replace(decision, mode=Mode.WHOLE)
        target = self._pick(device, decision.engine)
        if target is None:  # as the conductor: the other device when this one has no engine
            other: Device = "cpu" if device == "gpu" else "gpu"
            target = self._pick(other, None)
            if target is None:
                return False
            decision = replace(decision, device=other, mode=Mode.WHOLE)
        f.decision = decision
        self.decisions[_kind(decision)] += 1
        if decision.mode is Mode.PD_SPLIT:
            gpu, cpu = self._pick("gpu", None), self._pick("cpu", decision.engine)
            assert gpu is not None and cpu is not None
            for e in (gpu, cpu):
                self._reserve(f, e)
            f.split_cpu = cpu.name
            self._start_prefill(f, gpu)
        else:
            self._reserve(f, target)
            self._submit(f, target, f.req.prompt_tokens, f.req.output_tokens)
        return True

    def _reserve(self, f: Flight, e: Engine) -> None:
        f.holds.add(e.name)
        f.unstarted.add(e.name)
        e.inflight += 1
        e.scheduled += 1

    def _started(self, f: Flight, e: Engine) -> None:
        if e.name in f.unstarted:
            f.unstarted.discard(e.name)
            e.scheduled -= 1

    def _release(self, f: Flight, e: Engine) -> None:
        self._started(f, e)
        if e.name in f.holds:
            f.holds.discard(e.name)
            e.inflight -= 1

    def _submit(self, f: Flight, e: Engine, context: int, new: int, kv_ready: int = 0, kv_delay: float = 0.0) -> None:
        f.segment += 1
        rid = f"{f.index}.{f.segment}"
        e.core.submit(SimRequest(rid, context, new, kv_ready_tokens=kv_ready, kv_delay=kv_delay), at=self.now)
        e.stalled = False
        f.rid, f.engine = rid, e.name
        f.devices.add(e.device)
        self.by_rid[rid] = f

    def _start_prefill(self, f: Flight, gpu: Engine) -> None:
        handoff = self.limits.handoff
        first = 2 if handoff == "syshax" else 1
        f.hidden_first = handoff in ("kv-transfer", "llamacpp-slots")
        self._submit(f, gpu, f.req.prompt_tokens, min(first, f.req.output_tokens))

    def _continue_on_cpu(self, f: Flight, gpu: Engine) -> None:
        """The GPU's part ended: hand over to the CPU engine reserved at routing."""
        cpu = self.engines[f.split_cpu or ""]
        handoff = self.limits.handoff
        context = f.req.prompt_tokens + f.visible
        remaining = f.req.output_tokens - f.visible
        if handoff == "recompute":
            self._started(f, cpu)
            self._submit(f, cpu, context, remaining)
        elif handoff == "syshax":
            self._started(f, cpu)  # the live loop counts the CPU started once its stream opens
            delay = timing.transfer_time(gpu.core.profile, context)
            self._submit(f, cpu, context, self._segment(f, remaining), context, delay)
        else:  # kv-transfer, llamacpp-slots: the KV of the prompt moves; the CPU writes every token
            delay = timing.transfer_time(gpu.core.profile, f.req.prompt_tokens)
            self._submit(f, cpu, f.req.prompt_tokens, f.req.output_tokens, f.req.prompt_tokens, delay)

    def _segment(self, f: Flight, remaining: int) -> int:
        limit = f.decision.token_limit if f.decision is not None else None
        return remaining if limit is None else max(1, min(limit, remaining))

    # -- engine results --------------------------------------------------------------
    def _deliver(self, e: Engine, result: StepResult) -> None:
        per_step = (result.end - result.start) / max(1, result.steps)
        for seq, n in result.tokens:
            last = e.last_token.get(seq.rid)
            if last is None:
                e.ttft_sum += result.end - seq.arrival
                e.ttft_count += 1
            else:
                e.tpot_sum += per_step * n
                e.tpot_count += n
            e.last_token[seq.rid] = result.end
            f = self.by_rid.get(seq.rid)
            if f is None or f.done:
                continue
            if f.hidden_first and e.device == "gpu":
                continue
            self._started(f, e)
            f.visible += n
            if e.device == "cpu":
                f.cpu_tokens += n
            if f.first_token is None:
                f.first_token = result.end
        for seq in result.finished:
            e.last_token.pop(seq.rid, None)
            f = self.by_rid.pop(seq.rid, None)
            if f is not None and not f.done:
                self._segment_done(f, e)

    def _segment_done(self, f: Flight, e: Engine) -> None:
        if f.visible >= f.req.output_tokens:
            self._finish(f, "ok")
        elif e.device == "gpu" and f.split_cpu is not None and f.engine == e.name and len(f.devices) == 1:
            self._release(f, e)
            self._continue_on_cpu(f, e)
        else:  # a syshax CPU segment stopped at its token limit ("scheduled"): ask again
            f.features = replace(f.features, generated_tokens=f.visible)
            decision = self.policy(self.snapshot(), f.features, self.limits)
            self.decisions["reask"] += 1
            f.decision = replace(f.decision or decision, token_limit=decision.token_limit)
            context = f.req.prompt_tokens + f.visible
            self._submit(f, e, context, self._segment(f, f.req.output_tokens - f.visible), context)

    def _finish(self, f: Flight, outcome: str) -> None:
        self.open -= 1
        f.outcome = outcome
        if outcome == "ok":
            f.finished = self.now
        elif f.rid is not None and f.engine is not None:
            e = self.engines[f.engine]
            if e.core.abort(f.rid) is not None:
                e.stalled = False
            self.by_rid.pop(f.rid, None)
        for name in list(f.holds):
            self._release(f, self.engines[name])

    def _kick(self) -> None:
        while self.queue:
            head = self.queue[0]
            if head.done:
                self.queue.popleft()
                continue
            if not self._try_route(head):
                return
            self.queue.popleft()

    # -- the clock ---------------------------------------------------------------------
    def run(self, requests: Sequence[Request]) -> VtimeResult:
        """Replay ``requests`` (sorted by arrival) to the end; every request ends somehow."""
        arrivals = deque(sorted(enumerate(requests), key=lambda x: (x[1].arrival, x[0])))
        next_scrape = 0.0
        while arrivals or self.open:
            t_arrival = arrivals[0][1].arrival if arrivals else INF
            t_deadline = self.deadlines[0][0] if self.deadlines else INF
            engine_times = [(e.next_time(), i, e) for i, e in enumerate(self.engines.values())]
            t_engine, _, first = min(engine_times, key=lambda x: (x[0], x[1]))
            if not self.open and t_engine == INF:
                # Nothing runs until the next arrival: scraping idle engines changes nothing.
                next_scrape = max(next_scrape, t_arrival)
            t = min(t_arrival, t_deadline, t_engine, next_scrape)
            if t == INF:
                raise RuntimeError("virtual conductor stuck: requests open but no engine can run them")
            self.now = max(self.now, t)
            if t_engine == t and first.pending is not None:
                done, first.pending = first.pending, None
                self._deliver(first, done)
                self._kick()
            elif next_scrape == t:
                for e in self.engines.values():
                    e.scrape(self.now)
                next_scrape = self.now + self.interval
                self._kick()
            elif t_deadline == t:
                _, index = heapq.heappop(self.deadlines)
                f = self.flights[index]
                if not f.done:
                    self._finish(f, "timeout")
                    self._kick()
            elif t_arrival == t:
                index, req = arrivals.popleft()
                self._arrive(index, req)
            else:
                # An engine with work never lags the clock, except after a stall: idle time passed.
                first.core.now = max(first.core.now, self.now)
                horizon = min(t_arrival, t_deadline, next_scrape,
                              *(x[0] for x in engine_times if x[2] is not first))
                result = first.core.advance(max(horizon, first.core.now))
                if result is None:
                    first.stalled = True
                else:
                    first.pending = result
        return self._result()

    def _arrive(self, index: int, req: Request) -> None:
        features = RequestFeatures(prompt_tokens=req.prompt_tokens, max_tokens=req.output_tokens,
                                   request_id=str(index))
        f = Flight(index, req, features, deadline=self.now + self.timeout)
        self.flights.append(f)
        self.open += 1
        heapq.heappush(self.deadlines, (f.deadline, index))
        if not self.queue and self._try_route(f):
            return
        if sum(not w.done for w in self.queue) >= self.max_queue:
            self._finish(f, "rejected")
            self.decisions["rejected (queue full)"] += 1
            return
        self.decisions["queued"] += 1
        self.queue.append(f)

    def _result(self) -> VtimeResult:
        outcomes = []
        for f in self.flights:
            route = "none" if not f.devices else "split" if len(f.devices) > 1 else next(iter(f.devices))
            arrival = f.req.arrival
            outcomes.append(Outcome(
                arrival=arrival, prompt_tokens=f.req.prompt_tokens, output_tokens=f.visible,
                ttft=None if f.first_token is None else f.first_token - arrival,
                e2e=None if f.finished is None else f.finished - arrival,
                cpu_tokens=f.cpu_tokens, route=route,
            ))
        busy: dict[Device, float] = {"gpu": 0.0, "cpu": 0.0}
        for e in self.engines.values():
            busy[e.device] += e.core.counters.busy_time
        return VtimeResult(outcomes, busy, dict(self.decisions),
                           rejected=sum(f.outcome == "rejected" for f in self.flights),
                           timed_out=sum(f.outcome == "timeout" for f in self.flights))


def _kind(decision: Decision) -> str:
    """A decision's kind for the counts: device and mode, and what drove it."""
    if decision.device is None:
        return "queued"
    kind = "pd_split" if decision.mode is Mode.PD_SPLIT else decision.device
    return kind
