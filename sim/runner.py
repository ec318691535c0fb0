"""Virtual-time runner: a workload through simulated engines and a routing policy, in seconds.

It behaves like the live conductor (``design.md``, "A request's path"): at each arrival
it builds a :class:`~syshaxd.snapshot.Snapshot` — the engines' metrics as of the last
scrape (every ``scrape_interval`` seconds, rates over ``rate_window`` through the
monitor's own RateTracker) plus the conductor's live ``inflight``/``scheduled`` counts —
and calls the policy. ``device None`` queues the request (bounded FIFO; full = rejected)
until an engine releases one or a scrape lands; ``request_timeout`` ends a request
wherever it is. ``pd_split`` prefills on a GPU engine and decodes on a CPU engine per the
handoff protocol; a CPU ``token_limit`` stops the CPU after that many tokens and asks the
policy again for the next limit (sysHAX's ``"scheduled"`` loop). Engine steps between
events are fast-forwarded, so 10,000 requests take seconds; the same inputs always give
the same result. What the conductor knows of each engine is :mod:`sim.virtual_engine`;
what it tracks of each request is :mod:`sim.flight`. Before the first request the daemon's
startup check runs (``monitor.startup_check``): one short test generation per engine, so
the monitor has measured every engine's decode speed when traffic starts, as it has live.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from sim import timing
from sim.core import SimRequest, StepResult
from sim.flight import Flight, RunOptions
from sim.report import RunResult, summarise
from sim.traces import TraceRequest
from sim.virtual_engine import EngineSpec, VirtualEngine
from syshaxd.config import Handoff
from syshaxd.policy.common import pick_engine
from syshaxd.policy.queueing import evict_index, next_index
from syshaxd.routing import Limits, Mode, Policy, RequestFeatures
from syshaxd.snapshot import Device, Snapshot

__all__ = ["EngineSpec", "RunOptions", "VirtualConductor", "run"]

INF = math.inf


class VirtualConductor:
    """Replays workloads through simulated engines under a policy, in virtual time."""

    def __init__(self, engines: Sequence[EngineSpec], policy: Policy, limits: Limits,
                 options: RunOptions | None = None) -> None:
        if not engines:
            raise ValueError("a run needs at least one engine")
        names = [e.name for e in engines]
        if len(set(names)) != len(names):
            raise ValueError(f"engine names must be unique: {names}")
        self.options = options or RunOptions()
        self.engines = {e.name: VirtualEngine.new(e, self.options.rate_window, self.options.latency_window) for e in engines}
        self.policy, self.limits = policy, limits
        self.handoff: Handoff = self.options.handoff or limits.handoff
        self.now = 0.0
        self.queue: deque[Flight] = deque()
        self.flights: list[Flight] = []
        self.by_rid: dict[str, Flight] = {}
        self.deadlines: list[tuple[float, int]] = []
        self.decisions: Counter[str] = Counter()
        # The conductor's token books per engine (syshaxd/conductor/books.py): max_tokens of
        # the requests it holds, prompt tokens of those not started yet.
        self.decode_tokens: Counter[str] = Counter()
        self.prompt_tokens: Counter[str] = Counter()
        # ... and the answers each engine has started: (first token's time, max_tokens) by request
        self.answers: dict[str, dict[int, tuple[float, int]]] = {name: {} for name in self.engines}
        self.open = 0
        self.check_busy: dict[str, float] = {}  # busy seconds before the first request: the startup check
        self.progress: Callable[[int, int], None] | None = None
        self.total = 0

    # -- what the policy sees --------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The engines as the live conductor would show them to its policy now."""
        views = []
        for name, e in self.engines.items():
            view = e.view()
            metrics = replace(view.metrics, kv_capacity_tokens=e.core.profile.kv_capacity_tokens)
            views.append(replace(view, metrics=metrics, inflight_decode_tokens=self.decode_tokens[name],
                                 scheduled_prompt_tokens=self.prompt_tokens[name],
                                 answers=tuple((self.now - at, most) for at, most in self.answers[name].values())))
        return Snapshot(taken_at=self.now, engines=tuple(views))

    def _pick(self, snap: Snapshot, device: Device | None, preferred: str | None) -> VirtualEngine | None:
        if device is None:
            return None
        if preferred in self.engines and self.engines[preferred].spec.device == device:
            return self.engines[preferred]
        view = pick_engine(snap, device)
        return self.engines[view.name] if view is not None else None

    # -- routing -----------------------------------------------------------------------
    def _fits(self, f: Flight, e: VirtualEngine) -> bool:
        p = e.core.profile
        return f.req.prompt_tokens + f.req.output_tokens <= p.max_model_len and f.req.prompt_tokens < p.kv_capacity_tokens

    def _route(self, f: Flight) -> bool:
        snap = self.snapshot()
        f.features = replace(f.features, waited=self.now - f.req.arrival)
        decision = self.policy(snap, f.features, self.limits)
        if decision.device is None:
            return False
        gpu = cpu = None
        if decision.mode is Mode.PD_SPLIT:
            gpu, cpu = self._pick(snap, "gpu", None), self._pick(snap, "cpu", decision.engine)
            if gpu is None or cpu is None:
                decision = replace(decision, mode=Mode.WHOLE)
        target = self._pick(snap, decision.device, decision.engine)
        if target is None:  # as the conductor: the other device when this one has no engine
            other: Device = "cpu" if decision.device == "gpu" else "gpu"
            target = self._pick(snap, other, None)
            if target is None:
                return False
            decision = replace(decision, device=other, mode=Mode.WHOLE)
        f.decision = decision
        self.decisions["pd_split" if decision.mode is Mode.PD_SPLIT else str(decision.device)] += 1
        if decision.mode is Mode.PD_SPLIT and gpu is not None and cpu is not None:
            if not (self._fits(f, gpu) and self._fits(f, cpu)):
                self._finish(f, "error")
                return True
            for e in (gpu, cpu):
                self._reserve(f, e)
            f.split_cpu = cpu.spec.name
            first = 2 if self.handoff == "syshax" else 1
            f.hidden_first = self.handoff in ("kv-transfer", "llamacpp-slots")
            self._submit(f, gpu, f.req.prompt_tokens, min(first, f.req.output_tokens))
            return True
        if not self._fits(f, target):
            self._finish(f, "error")
            return True
        self._reserve(f, target)
        new = f.req.output_tokens
        if target.spec.device == "cpu" and self.options.cpu_segments:
            new = self._segment(f, new)
        self._submit(f, target, f.req.prompt_tokens, new)
        return True

    def _segment(self, f: Flight, remaining: int) -> int:
        limit = f.decision.token_limit if f.decision is not None else None
        return remaining if limit is None else max(1, min(limit, remaining))

    def _reserve(self, f: Flight, e: VirtualEngine) -> None:
        f.holds.add(e.spec.name)
        f.unstarted.add(e.spec.name)
        e.inflight += 1
        e.scheduled += 1
        self.decode_tokens[e.spec.name] += f.features.max_tokens
        self.prompt_tokens[e.spec.name] += f.features.prompt_tokens

    def _started(self, f: Flight, e: VirtualEngine) -> None:
        if e.spec.name in f.unstarted:
            f.unstarted.discard(e.spec.name)
            e.scheduled -= 1
            self.prompt_tokens[e.spec.name] -= f.features.prompt_tokens
            self.answers[e.spec.name][f.index] = (self.now, f.features.max_tokens)

    def _release(self, f: Flight, e: VirtualEngine) -> None:
        self._started(f, e)
        if e.spec.name in f.holds:
            f.holds.discard(e.spec.name)
            e.inflight -= 1
            self.decode_tokens[e.spec.name] -= f.features.max_tokens
            self.answers[e.spec.name].pop(f.index, None)

    def _submit(self, f: Flight, e: VirtualEngine, context: int, new: int, kv_ready: int = 0, kv_delay: float = 0.0) -> None:
        f.segment += 1
        rid = f"{f.index}.{f.segment}"
        # vLLM caches prompt blocks (the GPU engines); llama.cpp's per-slot prompt cache is not modelled
        prefix = f.req.prefix if e.spec.device == "gpu" else ()
        e.core.submit(SimRequest(rid, context, new, kv_ready_tokens=kv_ready, kv_delay=kv_delay, prefix=prefix,
                                 prefix_block=f.req.prefix_block), at=self.now)
        e.stalled = False
        f.rid, f.engine = rid, e.spec.name
        f.devices.add(e.spec.device)
        self.by_rid[rid] = f

    def _to_cpu(self, f: Flight, gpu: VirtualEngine) -> None:
        """The GPU's part of a split ended: continue on the CPU engine reserved for it."""
        cpu = self.engines[f.split_cpu or ""]
        if self.handoff == "recompute":
            context = f.req.prompt_tokens + f.visible
            self._started(f, cpu)
            self._submit(f, cpu, context, f.req.output_tokens - f.visible)
        elif self.handoff == "syshax":
            context = f.req.prompt_tokens + f.visible
            delay = timing.transfer_time(cpu.core.profile, context)
            self._started(f, cpu)
            self._submit(f, cpu, context, self._segment(f, f.req.output_tokens - f.visible), context - 1, delay)
        else:  # kv-transfer (over the link) or llamacpp-slots (saved, then restored: twice)
            trips = 2 if self.handoff == "llamacpp-slots" else 1
            delay = trips * timing.transfer_time(cpu.core.profile, f.req.prompt_tokens)
            self._submit(f, cpu, f.req.prompt_tokens, f.req.output_tokens, f.req.prompt_tokens - 1, delay)

    # -- engine results ------------------------------------------------------------------
    def _deliver(self, e: VirtualEngine, result: StepResult) -> None:
        per_step = (result.end - result.start) / max(1, result.steps)
        end, device, last, by_rid = result.end, e.spec.device, e.last_token, self.by_rid
        decoded = 0
        for seq, n in result.tokens:
            rid = seq.rid
            if rid in last:
                decoded += n
            else:
                e.ttft[0] += 1
                e.ttft[1] += end - seq.arrival
                last[rid] = end
            f = by_rid.get(rid)
            if f is None or f.done or (f.hidden_first and device == "gpu"):
                continue
            if f.unstarted:
                self._started(f, e)
            f.visible += n
            f.tokens[device] += n
            if f.first_token is None:
                f.first_token = end
        e.tpot[0] += decoded
        e.tpot[1] += per_step * decoded
        for seq in result.finished:
            e.last_token.pop(seq.rid, None)
            f = self.by_rid.pop(seq.rid, None)
            if f is not None and not f.done:
                self._segment_done(f, e)

    def _segment_done(self, f: Flight, e: VirtualEngine) -> None:
        if f.visible >= f.req.output_tokens:
            self._finish(f, "ok")
        elif e.spec.device == "gpu" and f.split_cpu is not None and len(f.devices) == 1:
            self._release(f, e)
            self._to_cpu(f, e)
        else:  # a CPU segment stopped at its token limit: ask the policy for the next one
            f.features = replace(f.features, generated_tokens=f.visible, has_num_decode_tokens=True)
            decision = self.policy(self.snapshot(), f.features, self.limits)
            f.reasks += 1
            self.decisions["reask"] += 1
            f.decision = replace(f.decision or decision, token_limit=decision.token_limit)
            context = f.req.prompt_tokens + f.visible
            self._submit(f, e, context, self._segment(f, f.req.output_tokens - f.visible), context - 1)

    def _finish(self, f: Flight, outcome: str) -> None:
        self.open -= 1
        f.outcome = outcome
        if outcome == "ok":
            f.finished = self.now
        elif f.rid is not None and f.engine is not None:
            engine = self.engines[f.engine]
            engine.core.abort(f.rid)
            engine.stalled = False  # freed blocks may let queued work start
            self.by_rid.pop(f.rid, None)
        for name in list(f.holds):
            self._release(f, self.engines[name])
        if self.progress is not None:
            self.progress(len(self.flights) - self.open, self.total)

    def _next(self) -> int:
        arrivals = [f.req.arrival for f in self.queue]
        return next_index(arrivals, self.now, self.limits.ttft_target, self.options.queue_order)

    def _kick(self) -> None:
        while self.queue and self.queue[0].done:
            self.queue.popleft()
        while self.queue:
            i = self._next()
            f = self.queue[i]
            if f.done:
                del self.queue[i]
            elif self._route(f):
                del self.queue[i]
            else:
                return

    def _arrive(self, index: int, req: TraceRequest) -> None:
        features = RequestFeatures(prompt_tokens=req.prompt_tokens, max_tokens=req.output_tokens, request_id=str(index))
        if not self.flights:
            self.check_busy = {name: e.core.counters.busy_time for name, e in self.engines.items()}
        f = Flight(index, req, features, deadline=self.now + self.options.timeout)
        self.flights.append(f)
        self.open += 1
        heapq.heappush(self.deadlines, (f.deadline, index))
        self.queue = deque(w for w in self.queue if not w.done)
        if not self.queue and self._route(f):
            return
        if len(self.queue) >= self.options.max_queue:
            order = self.options.queue_order
            i = evict_index([w.req.arrival for w in self.queue], self.now, self.limits.ttft_target, order)
            self.decisions["rejected"] += 1
            if i is None:
                self._finish(f, "rejected")
                return
            late = self.queue[i]
            del self.queue[i]
            self._finish(late, "rejected")
        self.decisions["queued"] += 1
        self.queue.append(f)
        if self.options.queue_order != "fifo":
            self._kick()  # the head may be late and this one on time

    # -- the clock -------------------------------------------------------------------------
    def run(self, requests: Sequence[TraceRequest],
            progress: Callable[[int, int], None] | None = None) -> RunResult:
        """Replay ``requests`` to the end; every request ends (ok, rejected, timeout, error)."""
        self.progress, self.total = progress, len(requests)
        arrivals = deque(sorted(enumerate(requests), key=lambda x: (x[1].arrival, x[0])))
        next_scrape = self._startup()
        engines = list(self.engines.values())
        while arrivals or self.open:
            t_arrival = arrivals[0][1].arrival if arrivals else INF
            t_deadline = self.deadlines[0][0] if self.deadlines else INF
            times = [e.next_time() for e in engines]
            t_engine = min(times)
            first = engines[times.index(t_engine)]
            t = min(t_arrival, t_deadline, t_engine, next_scrape)
            if t == INF:
                raise RuntimeError("virtual conductor stuck: requests open but no engine can run them")
            self.now = max(self.now, t)
            if t_engine == t and first.pending is not None:
                result, first.pending = first.pending, None
                self._deliver(first, result)
                self._kick()
            elif next_scrape == t:
                for e in engines:
                    e.scrape(self.now)
                next_scrape = self.now + self.options.scrape_interval
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
                if not first.core.running:
                    first.core.now = max(first.core.now, self.now)  # idle time passed
                horizon = min([t_arrival, t_deadline, next_scrape] + [x for x, e in zip(times, engines, strict=True)
                                                                      if e is not first])
                first.pending = first.core.advance(max(horizon, first.core.now))
                first.stalled = first.pending is None
        return self._result()

    def _startup(self) -> float:
        """The daemon's startup check: one short test generation per engine, ``startup_lead`` before traffic.

        As in the live daemon (``syshaxd/service/startup.py``), it lands in each engine's TTFT
        and TPOT histograms, so the monitor knows every engine's decode speed before the first
        request; it is no flight and its busy time is not in the results. Returns the first scrape's time.
        """
        o = self.options
        if not o.startup_check:
            return 0.0
        start = self.now = -o.startup_lead
        for name, e in self.engines.items():
            e.core.now = start
            e.core.submit(SimRequest(f"startup.{name}", o.test_prompt_tokens, o.test_tokens), at=start)
        return start

    def _result(self) -> RunResult:
        records = [f.record() for f in self.flights]
        busy = {name: e.core.counters.busy_time - self.check_busy.get(name, 0.0) for name, e in self.engines.items()}
        devices: dict[str, str] = {name: e.spec.device for name, e in self.engines.items()}
        preemptions = {name: e.core.counters.preemptions for name, e in self.engines.items()}
        end = max([self.now] + [e.core.now for e in self.engines.values()])
        return RunResult(records, summarise(records, busy, devices, preemptions, end), dict(self.decisions))


def run(requests: Sequence[TraceRequest], engines: Sequence[EngineSpec], policy: Policy, limits: Limits | None = None,
        options: RunOptions | None = None, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """Replay a workload through simulated engines under a policy (see :class:`VirtualConductor`)."""
    return VirtualConductor(engines, policy, limits or Limits(), options).run(requests, progress)
