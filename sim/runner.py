"""Virtual-time runner: a workload through simulated engines and the daemon's scheduling core.

It is the core's second driver (the daemon's conductor is the first): the clock and the
engines are its own, every decision is :mod:`syshaxd.core`'s. Events come in time order --
an arrival, an engine step's end, a scrape (every ``scrape_interval`` seconds, rates over
``rate_window`` through the monitor's own RateTracker), a deadline -- and each becomes the
call the daemon makes for the same event: ``arrive`` for a request, ``first_byte`` when an
engine's first token of it is out, ``release`` and ``finish`` when its part ends, a kick
when a scrape lands. When the core takes back a sheddable request's GPU slot before its
first token (``ticket.revoke``), the runner drops it from its engine and counts it refused
(``shed``), as the daemon aborts it and answers 429. A placement is carried out as the daemon's dispatcher does: whole on
one engine, or prefill on the GPU and decode on the CPU through the handoff protocol; with
the ``syshax`` handoff the CPU stops at the decision's token limit and the policy is asked
again. Engine steps between events are fast-forwarded, so 10,000 requests take seconds; the
same inputs always give the same result. Before the first request the daemon's startup
check runs (one short test generation per engine), so the monitor has measured every
engine's decode speed when traffic starts, as it has live.

Each request carries its service class (``TraceRequest.level``) into the core, which orders,
sheds and refuses by it as the daemon does; the results judge each request at its own
class's targets (:func:`syshaxd.routing.limits_for`) and count, per class, the requests,
those that met their targets and the refusals by reason (:class:`sim.report.ClassSummary`).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from sim.core import SimRequest, StepResult
from sim.flight import Change, Flight, RunOptions
from sim.report import RunResult, summarise
from sim.traces import TraceRequest
from sim.virtual_engine import EngineSpec, RunEngine, VirtualEngine
from syshaxd.core import EngineBook, Outcome, Refusal, Scheduler
from syshaxd.routing import Handoff, Limits, Mode, Policy, RequestFeatures, limits_for
from syshaxd.snapshot import Snapshot

__all__ = ["Change", "EngineSpec", "RunOptions", "VirtualConductor", "run"]

#: The name a policy function given to the runner goes by in the core.
CUSTOM = "custom"


class VirtualConductor:
    """Replays workloads through simulated engines and the scheduling core, in virtual time."""

    def __init__(self, engines: Sequence[EngineSpec | RunEngine], policy: str | Policy, limits: Limits,
                 options: RunOptions | None = None, changes: Sequence[Change] = ()) -> None:
        """Args:
            engines: specs of modelled engines (:class:`VirtualEngine`), or engines of one's own
                (a :class:`~sim.scripted.ScriptedEngine`).
            changes: the operator's changes of the limits during the run, in time order.
        """
        if not engines:
            raise ValueError("a run needs at least one engine")
        self.options = options or RunOptions()
        made = [e if not isinstance(e, EngineSpec) else
                VirtualEngine.new(e, self.options.rate_window, self.options.latency_window) for e in engines]
        names = [e.spec.name for e in made]
        if len(set(names)) != len(names):
            raise ValueError(f"engine names must be unique: {names}")
        self.engines: dict[str, RunEngine] = {e.spec.name: e for e in made}
        self.limits = limits
        self.changes = deque(sorted(changes, key=lambda c: c.at))
        self.handoff: Handoff = self.options.handoff or limits.handoff
        self.policy_name = policy if isinstance(policy, str) else CUSTOM
        self.now = 0.0
        self._observed = Snapshot(taken_at=0.0)
        self.core = Scheduler(
            (EngineBook(e.spec.name, e.spec.device, f"sim://{e.spec.name}", "vllm-v1") for e in made), _Inputs(self),
            queue_limit=self.options.max_queue, request_timeout=self.options.timeout,
            policies=None if isinstance(policy, str) else {CUSTOM: policy}, order=self.options.queue_order)
        self._observe()
        self.flights: list[Flight] = []
        self.by_rid: dict[str, Flight] = {}
        self.deadlines: list[tuple[float, int]] = []  # placed flights' request deadlines
        self.decisions: Counter[str] = Counter()
        self.open = 0
        self.check_busy: dict[str, float] = {}  # busy seconds before the first request: the startup check
        self.progress: Callable[[int, int], None] | None = None
        self.total = 0

    # -- what the core reads (_Inputs) -----------------------------------------------------

    def _observe(self) -> None:
        self._observed = Snapshot(taken_at=self.now, engines=tuple(e.view() for e in self.engines.values()))

    def snapshot(self) -> Snapshot:
        """The engines as the policy would see them now (scrape, flags and the core's counts)."""
        return self.core.snapshot(self.now)

    # -- carrying out the core's decisions -------------------------------------------------

    def _arrive(self, index: int, req: TraceRequest) -> None:
        features = RequestFeatures(prompt_tokens=req.prompt_tokens, max_tokens=req.output_tokens, request_id=str(index),
                                   level=req.level)
        if not self.flights:
            self.check_busy = {name: e.busy_time for name, e in self.engines.items()}
        ticket = self.core.ticket(str(index), features, self.now)
        own = limits_for(self.limits, features)  # the request is judged at its own class's targets
        f = Flight(index, req, features, ticket, ttft_target=own.ttft_target, tpot_target=own.tpot_target)
        ticket.revoke = lambda refusal: self._revoked(f, refusal)
        self.flights.append(f)
        self.open += 1
        outcome = self.core.arrive(ticket, self.now, wake=lambda o: self._placed(f, o))
        if outcome is None:
            self.decisions["queued"] += 1
            f.held = True
        else:
            self._placed(f, outcome)

    def _placed(self, f: Flight, outcome: Outcome) -> None:
        if isinstance(outcome, Refusal):
            self.decisions[outcome.outcome] += 1
            f.refusal = outcome.reason
            self._finish(f, outcome.outcome)
            return
        decision = outcome.decision
        f.decision, f.placement = decision, outcome.engines
        heapq.heappush(self.deadlines, (f.ticket.deadline, f.index))
        self.decisions["pd_split" if decision.mode is Mode.PD_SPLIT else str(decision.device)] += 1
        first = self.engines[outcome.engines[0]]
        if decision.mode is Mode.PD_SPLIT:
            f.split_cpu = outcome.engines[1]
            f.hidden_first = self.handoff in ("kv-transfer", "llamacpp-slots")
            prefill = 2 if self.handoff == "syshax" else 1
            self._submit(f, first, f.req.prompt_tokens, min(prefill, f.req.output_tokens))
            return
        self._submit(f, first, f.req.prompt_tokens, f.req.output_tokens)

    def _revoked(self, f: Flight, refusal: Refusal) -> None:
        """The core took back ``f``'s GPU slot before its first token: the engine drops it, it is refused."""
        self.decisions["revoked"] += 1
        f.refusal = refusal.reason
        self._finish(f, refusal.outcome)

    def _segment(self, f: Flight, remaining: int) -> int:
        """Tokens the CPU writes before it stops (the ``syshax`` handoff's token limit)."""
        limit = f.decision.token_limit if f.decision is not None else None
        return remaining if limit is None else max(1, min(limit, remaining))

    def _submit(self, f: Flight, e: RunEngine, context: int, new: int, kv_ready: int = 0,
                kv_delay: float = 0.0) -> None:
        if not e.accepts(context, new):  # the engine refuses what it cannot hold, as vLLM does
            f.refusal = "engine_refused"
            self._finish(f, "error")
            return
        f.segment += 1
        rid = f"{f.index}.{f.segment}"
        # vLLM caches prompt blocks (the GPU engines); llama.cpp's per-slot prompt cache is not modelled
        prefix = f.req.prefix if e.spec.device == "gpu" else ()
        e.submit(SimRequest(rid, context, new, kv_ready_tokens=kv_ready, kv_delay=kv_delay, prefix=prefix,
                            prefix_block=f.req.prefix_block), self.now)
        f.rid, f.engine = rid, e.spec.name
        f.devices.add(e.spec.device)
        self.by_rid[rid] = f

    def _to_cpu(self, f: Flight) -> None:
        """The GPU's part of a split ended: continue on the CPU engine placed for it."""
        cpu = self.engines[f.split_cpu or ""]
        if self.handoff == "recompute":
            context = f.req.prompt_tokens + f.visible
            self.core.first_byte(f.ticket, cpu.spec.name, self.now)  # the continuation's stream opens at once
            self._submit(f, cpu, context, f.req.output_tokens - f.visible)
        elif self.handoff == "syshax":
            context = f.req.prompt_tokens + f.visible
            delay = cpu.transfer_time(context)
            self.core.first_byte(f.ticket, cpu.spec.name, self.now)
            self._submit(f, cpu, context, self._segment(f, f.req.output_tokens - f.visible), context - 1, delay)
        else:  # kv-transfer (over the link) or llamacpp-slots (saved, then restored: twice)
            trips = 2 if self.handoff == "llamacpp-slots" else 1
            delay = trips * cpu.transfer_time(f.req.prompt_tokens)
            self._submit(f, cpu, f.req.prompt_tokens, f.req.output_tokens, f.req.prompt_tokens - 1, delay)

    # -- engine results ------------------------------------------------------------------
    def _deliver(self, e: RunEngine, result: StepResult) -> None:
        e.delivered(result)
        end, device, name, by_rid = result.end, e.spec.device, e.spec.name, self.by_rid
        for seq, n in result.tokens:
            f = by_rid.get(seq.rid)
            if f is None or f.done or (f.hidden_first and device == "gpu"):
                continue
            if name in f.ticket.unstarted:
                self.core.first_byte(f.ticket, name, self.now)
            f.visible += n
            f.tokens[device] += n
            if f.first_token is None:
                f.first_token = end
        for seq in result.finished:
            f = self.by_rid.pop(seq.rid, None)
            if f is not None and not f.done:
                self._segment_done(f, e)

    def _segment_done(self, f: Flight, e: RunEngine) -> None:
        if f.visible >= f.req.output_tokens:
            self._finish(f, "ok")
        elif e.spec.device == "gpu" and f.split_cpu is not None and len(f.devices) == 1:
            self.core.release(f.ticket, e.spec.name, self.now)
            self._to_cpu(f)
        else:  # a CPU segment stopped at its token limit (syshax): ask the policy for the next one
            f.features = replace(f.features, generated_tokens=f.visible, has_num_decode_tokens=True)
            decision = self.core.reask(f.features, self.now)
            f.reasks += 1
            self.decisions["reask"] += 1
            f.decision = replace(f.decision or decision, token_limit=decision.token_limit)
            context = f.req.prompt_tokens + f.visible
            self._submit(f, e, context, self._segment(f, f.req.output_tokens - f.visible), context - 1)

    def _finish(self, f: Flight, outcome: str) -> None:
        if f.done:
            return
        self.open -= 1
        f.outcome = outcome
        if outcome == "ok":
            f.finished = self.now
        elif f.rid is not None and f.engine is not None:
            self.engines[f.engine].abort(f.rid)
            self.by_rid.pop(f.rid, None)
        self.core.finish(f.ticket, self.now)
        if self.progress is not None:
            self.progress(len(self.flights) - self.open, self.total)

    # -- the clock -------------------------------------------------------------------------
    def run(self, requests: Sequence[TraceRequest],
            progress: Callable[[int, int], None] | None = None) -> RunResult:
        """Replay ``requests`` to the end; every request ends (ok, rejected, timeout, error)."""
        self.progress, self.total = progress, len(requests)
        arrivals = deque(sorted(enumerate(requests), key=lambda x: (x[1].arrival, x[0])))
        next_scrape = self._startup()
        engines = list(self.engines.values())
        core = self.core
        while arrivals or self.open:
            t_arrival = arrivals[0][1].arrival if arrivals else math.inf
            t_deadline = self.deadlines[0][0] if self.deadlines else math.inf
            t_waiting = core.next_deadline()
            t_waiting = math.inf if t_waiting is None else t_waiting
            times = [e.next_time() for e in engines]
            t_engine = min(times)
            first = engines[times.index(t_engine)]
            t_change = self.changes[0].at if self.changes else math.inf
            t = min(t_arrival, t_deadline, t_waiting, t_engine, next_scrape, t_change)
            if t == math.inf:
                raise RuntimeError("virtual conductor stuck: requests open but no engine can run them")
            self.now = max(self.now, t)
            if t_engine == t and first.pending is not None:
                result, first.pending = first.pending, None
                self._deliver(first, result)
            elif next_scrape == t:
                for e in engines:
                    e.scrape(self.now)
                self._observe()
                next_scrape = self.now + self.options.scrape_interval
                core.kick(self.now)
            elif t_change == t:
                self.limits = self.changes.popleft().limits
                core.changed()
                core.kick(self.now)
            elif t_waiting == t:
                core.expire(self.now)
            elif t_deadline == t:
                _, index = heapq.heappop(self.deadlines)
                f = self.flights[index]
                if not f.done:
                    f.refusal = "request_timeout"
                self._finish(f, "timeout")
            elif t_arrival == t:
                index, req = arrivals.popleft()
                self._arrive(index, req)
            else:
                horizon = min([t_arrival, t_deadline, t_waiting, next_scrape, t_change]
                              + [x for x, e in zip(times, engines, strict=True) if e is not first])
                first.compute(self.now, horizon)
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
        for e in self.engines.values():
            e.startup_check(start, o.test_prompt_tokens, o.test_tokens)
        return start

    def _result(self) -> RunResult:
        records = [f.record() for f in self.flights]
        busy = {name: e.busy_time - self.check_busy.get(name, 0.0) for name, e in self.engines.items()}
        devices: dict[str, str] = {name: e.spec.device for name, e in self.engines.items()}
        preemptions = {name: e.preemptions for name, e in self.engines.items()}
        end = max([self.now] + [e.clock for e in self.engines.values()])
        return RunResult(records, summarise(records, busy, devices, preemptions, end), dict(self.decisions))


class _Inputs:
    """What the core reads of a run (:class:`syshaxd.core.Inputs`): the last scrape, fixed
    limits and policy, every engine enabled."""

    def __init__(self, run: VirtualConductor) -> None:
        self.run = run

    @property
    def policy_name(self) -> str:
        return self.run.policy_name

    def observed(self) -> Snapshot:
        return self.run._observed

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        return True, False

    def limits(self) -> Limits:
        return self.run.limits


def run(requests: Sequence[TraceRequest], engines: Sequence[EngineSpec | RunEngine], policy: str | Policy,
        limits: Limits | None = None, options: RunOptions | None = None,
        progress: Callable[[int, int], None] | None = None, changes: Sequence[Change] = ()) -> RunResult:
    """Replay a workload through simulated engines and the scheduling core (see :class:`VirtualConductor`)."""
    return VirtualConductor(engines, policy, limits or Limits(), options, changes).run(requests, progress)
