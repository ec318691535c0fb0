"""The scheduling core: admission, placement, the books and release, with no I/O and no clock.

One :class:`Scheduler` decides for one box. A driver -- the daemon's conductor with real
time, the simulator's virtual-time runner with virtual time -- tells it what happens to
each request (:meth:`~Scheduler.arrive`, :meth:`~Scheduler.first_byte`,
:meth:`~Scheduler.release`, :meth:`~Scheduler.finish`, ...) and the time it happened; the
scheduler answers with values (:class:`~syshaxd.core.ticket.Placement`,
:class:`~syshaxd.core.ticket.Refusal`) and wakes waiting tickets through their callback.
When a request that is not sheddable would be refused for want of room, a sheddable request
placed on a GPU engine without a first byte gives up its slot instead
(:mod:`syshaxd.core.revoke`): the core settles it and calls its driver's ``revoke``.
What it needs to know of the world it reads from :class:`Inputs`: the engines as last
observed, their flags, the limits and the policy.

Admission asks the policy once per waiting request per change of state: a request the
policy held is asked again only after a count in the ledger, the observed engines, the
configuration or its own lane changed; a kick then costs O(log n) per request it admits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Protocol

from syshaxd.core.ledger import EngineBook, Ledger
from syshaxd.core.line import WaitingLine
from syshaxd.core.place import other_device, pick, place
from syshaxd.core.revoke import Revocable, gave_up
from syshaxd.core.ticket import NOT_WAITING, Outcome, Placement, Refusal, Ticket, Wake
from syshaxd.policy import QueueOrder, get_policy, queue_order
from syshaxd.routing import Decision, Limits, Mode, Policy, RequestFeatures, limits_for
from syshaxd.snapshot import EngineState, Snapshot

#: Seconds since arrival past which the policy is told how long a request has waited.
WAITED_MIN = 0.001


class Inputs(Protocol):
    """What the core reads of the world; every call is a memory read, never I/O."""

    @property
    def policy_name(self) -> str:
        """The active policy's name."""
        ...

    def observed(self) -> Snapshot:
        """The engines as last observed (the monitor's snapshot; the runner's last scrape).

        The same object until something new is observed: a new object is a change of state.
        """
        ...

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        """``(enabled, draining)`` of an engine."""
        ...

    def limits(self) -> Limits:
        """The decider's current limits."""
        ...


class Scheduler:
    """Admission, placement and the books of one box."""

    def __init__(self, engines: Iterable[EngineBook], inputs: Inputs, *, queue_limit: int,
                 request_timeout: float, policies: Mapping[str, Policy] | None = None,
                 order: QueueOrder | None = None) -> None:
        """One scheduler over ``engines``, reading ``inputs``.

        Args:
            policies: policy functions by name, besides the shipped ones (tests, experiments).
            order: the line's order whatever the policy (None: the policy's own,
                :func:`~syshaxd.policy.queue_order`).
        """
        self.ledger = Ledger(engines)
        self.inputs = inputs
        self.request_timeout = request_timeout
        self._order = order
        self.line = WaitingLine(queue_limit, self.queue_order(), inputs.limits().ttft_target)
        self.accepting = True
        #: Sheddable requests on a GPU engine before their first byte (:mod:`syshaxd.core.revoke`).
        self.revocable = Revocable()
        self._policies: dict[str, Policy] = dict(policies or {})
        self._observed: Snapshot | None = None
        self._bumps = 0  # changes of state outside the ledger (observations, configuration)
        self._kicking = False
        self._again = False

    # -- what the policy sees ------------------------------------------------------------

    def changed(self) -> None:
        """Something the policy reads changed outside the ledger (the configuration, a flag)."""
        self._bumps += 1

    def _state(self) -> int:
        observed = self.inputs.observed()
        if observed is not self._observed:
            self._observed = observed
            self._bumps += 1
        return self.ledger.version + self._bumps

    def snapshot(self, now: float) -> Snapshot:
        """The observed engines merged with their flags and the ledger's counts."""
        return self.ledger.merge(self.inputs.observed(), self.inputs.engine_flags, now)

    def queue_order(self) -> QueueOrder:
        """The waiting line's order now."""
        return self._order or queue_order(self.inputs.policy_name)

    def policy(self) -> Policy:
        """The active policy (instances are kept: round-robin has a cursor)."""
        name = self.inputs.policy_name
        found = self._policies.get(name)
        if found is None:
            found = self._policies[name] = get_policy(name)
        return found

    # -- admission -----------------------------------------------------------------------

    def ticket(self, request_id: str, features: RequestFeatures, now: float, age: float = 0.0) -> Ticket:
        """A new ticket for a request that arrived ``age`` seconds before ``now``."""
        arrived = now - max(0.0, age)
        return Ticket(request_id, features, arrived, arrived + self.request_timeout, priority=features.level.priority)

    def arrive(self, ticket: Ticket, now: float, wake: Wake | None = None) -> Outcome | None:
        """Admit ``ticket``: a placement or a refusal now, or None when it waits in line
        (``wake`` then hears the outcome, from a later call).

        A full line makes room, in this order: it sheds a waiting sheddable request (for a
        newcomer that is not sheddable); a sheddable request gives up its GPU slot before its
        first byte (likewise); in ``deadline`` order it refuses its oldest late request; else
        the newcomer is refused (429 ``queue_full``)."""
        if not self.accepting:
            return self._settle(ticket, Refusal(503, "stopping", "syshaxd is shutting down"))
        self._advance(now)
        if len(self.line) == 0:
            outcome = self._decide(ticket, now)
            if outcome is not None:
                return self._settle(ticket, outcome)
            ticket.asked = self._state()
        else:
            ticket.held = f"waiting behind {len(self.line)} requests"
        if self.line.full:
            full = Refusal(429, "queue_full", "no capacity: all engines are at their limits and the admission "
                           f"queue is full ({self.line.limit} waiting); retry later", retry_after=1)
            victim = self.line.evictable(ticket)
            if victim is not None and victim.features.level.sheddable:
                self.line.remove(victim)
                self._wake(victim, Refusal(429, "shed", f"refused to make room for a more important request: class "
                                           f"{victim.features.level.name!r} is sheddable", retry_after=1))
            elif self._take_back(ticket, now):
                pass  # a GPU slot came free: the newcomer waits in line for it (one over the limit till taken)
            elif victim is not None:  # it cannot meet its TTFT target any more
                self.line.remove(victim)
                self._wake(victim, full)
            else:
                return self._settle(ticket, full)
        self.line.push(ticket, now)
        self.kick(now)  # in deadline order it may be first in line
        if ticket.outcome is not None:
            return ticket.outcome
        ticket.wake = wake
        return None

    def _take_back(self, newcomer: Ticket, now: float) -> bool:
        """For a ``newcomer`` that is not sheddable, take back the GPU slot of a sheddable request
        placed there without a first byte (:mod:`syshaxd.core.revoke`); whether one was."""
        if newcomer.features.level.sheddable:
            return False
        victim = self.revocable.pick()
        if victim is None or victim.revoke is None:
            return False
        revoke, victim.revoke = victim.revoke, None
        self.revocable.drop(victim)
        victim.done, victim.wake = True, None
        for name in list(victim.holds):
            self.ledger.release(victim, name, now)
        refusal = gave_up(victim)
        victim.refusal = refusal
        revoke(refusal)  # the driver aborts it at the engine and answers its client
        return True

    def kick(self, now: float) -> None:
        """Offer capacity to waiting tickets, in line order, while the policy places the first."""
        if self._kicking:  # a wake callback released something: go round once more
            self._again = True
            return
        self._kicking = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._admit_waiting(now)
        finally:
            self._kicking = False

    def _admit_waiting(self, now: float) -> None:
        line = self.line
        line.reorder(self.queue_order(), self.inputs.limits().ttft_target, now)
        self._advance(now)
        while True:
            ticket = line.head()
            if ticket is None or ticket.asked == self._state():
                return
            outcome = self._decide(ticket, now)
            if outcome is None:
                ticket.asked = self._state()
                return
            line.remove(ticket)
            self._wake(ticket, outcome)

    def expire(self, now: float) -> None:
        """Let time pass in line: refuse waiting tickets whose request deadline has passed (504),
        and those that can no longer meet their TTFT target when their class refuses late work."""
        self._advance(now)
        for ticket in self.line.expired(now):
            self._wake(ticket, Refusal(504, "queue_timeout", "no capacity within system.request_timeout "
                                       f"({self.request_timeout:g} s)"))

    def _advance(self, now: float) -> None:
        for ticket in self.line.advance(now):
            level = ticket.features.level
            if level.late == "refuse":
                self.line.remove(ticket)
                target = level.ttft if level.ttft is not None else self.line.ttft_target
                self._wake(ticket, Refusal(429, "ttft_expired", f"no capacity within the {target:g} s to the first "
                                           f"token that class {level.name!r} allows; it refuses late work",
                                           retry_after=1))

    def next_deadline(self) -> float | None:
        """When :meth:`expire` next has something to do, if anyone waits."""
        times = [t for t in (self.line.next_deadline(), self.line.next_lateness()) if t is not None]
        return min(times) if times else None

    def withdraw(self, ticket: Ticket) -> None:
        """A waiting ticket leaves the line without an outcome (its client left)."""
        self.line.remove(ticket)

    def stop(self) -> None:
        """Admit nothing more; every waiting ticket is refused (503)."""
        self.accepting = False
        for ticket in self.line.drain():
            self._wake(ticket, Refusal(503, "stopping", "syshaxd is shutting down"))

    @property
    def waiting(self) -> int:
        """Tickets in line."""
        return len(self.line)

    # -- deciding ------------------------------------------------------------------------

    def _decide(self, ticket: Ticket, now: float) -> Outcome | None:
        snap = self.ledger.merge(self.inputs.observed(), self.inputs.engine_flags, now)
        features = ticket.features
        limits = limits_for(self.inputs.limits(), features)
        waited = now - ticket.arrived
        if waited > WAITED_MIN:  # the policy counts the wait
            features = replace(features, waited=waited)
        decision = self.policy()(snap, features, limits)
        if features.forced_mode is Mode.PD_SPLIT and decision.device is not None:
            decision = replace(decision, device="cpu", mode=Mode.PD_SPLIT,
                               reason=f"pd_disagg requested; policy said: {decision.reason}")
        if decision.device is None:
            if not snap.usable("gpu") and not snap.usable("cpu"):
                return Refusal(503, "no_engine", down_message(snap))
            ticket.held = decision.reason or "no capacity"
            return None
        placement = place(snap, features, decision)
        if placement is None:
            return Refusal(503, "no_engine", down_message(snap))
        if ticket.lane != NOT_WAITING:
            placement = replace(placement, waited=True)
        ticket.tpot_target = limits.tpot_target
        for name in placement.engines:
            self.ledger.reserve(ticket, name, now)
        if placement.decision.mode is Mode.WHOLE and self.ledger.engines[placement.engines[0]].device == "gpu":
            self.revocable.add(ticket, placement.engines[0])
        ticket.seen, ticket.limits, ticket.decided = snap, limits, now
        return placement

    def _settle(self, ticket: Ticket, outcome: Outcome) -> Outcome:
        if isinstance(outcome, Placement):
            ticket.placement = outcome
        else:
            ticket.refusal = outcome
        return outcome

    def _wake(self, ticket: Ticket, outcome: Outcome) -> None:
        self._settle(ticket, outcome)
        if ticket.wake is not None:
            wake, ticket.wake = ticket.wake, None
            wake(outcome)

    # -- a placed request's life -----------------------------------------------------------

    def first_byte(self, ticket: Ticket, engine: str, now: float) -> None:
        """Engine ``engine`` started answering ``ticket``."""
        self.revocable.drop(ticket, engine)
        self.ledger.start(ticket, engine, now)

    def release(self, ticket: Ticket, engine: str, now: float) -> bool:
        """Engine ``engine``'s part of ``ticket`` is over; waiting tickets may take its room."""
        self.revocable.drop(ticket, engine)
        if not self.ledger.release(ticket, engine, now):
            return False
        self.kick(now)
        return True

    def finish(self, ticket: Ticket, now: float) -> None:
        """``ticket`` ended, any way: out of line, every engine released, once."""
        if ticket.done:
            return
        ticket.done = True
        self.line.remove(ticket)
        self.revocable.drop(ticket)
        ticket.wake = None
        released = False
        for name in list(ticket.holds):
            released = self.ledger.release(ticket, name, now) or released
        if released:
            self.kick(now)

    def reask(self, features: RequestFeatures, now: float) -> Decision:
        """The policy's decision for a request already under way (the CPU stopped at its limit)."""
        return self.policy()(self.snapshot(now), features, limits_for(self.inputs.limits(), features))

    def take_other(self, ticket: Ticket, failed: str, now: float) -> str | None:
        """Once per ticket: a usable engine on the other device than ``failed``'s, reserved,
        for an engine that failed before the client saw a byte; None when none is."""
        if ticket.resubmitted:
            return None
        device = other_device(self.ledger.engines[failed].device)
        view = pick(self.snapshot(now), device, ticket.features)
        if view is None:
            return None
        ticket.resubmitted = True
        self.ledger.reserve(ticket, view.name, now)
        if device == "gpu":  # the whole request now runs there
            self.revocable.add(ticket, view.name)
        return view.name

    # -- requests the core does not place (pass-through routes) ----------------------------

    def passthrough_order(self, now: float) -> list[str] | Refusal:
        """Engines to try for a route the core does not place, best first: the GPU's usable
        engines, least loaded first, then the CPU's; a refusal when none is usable."""
        snap = self.snapshot(now)
        found = [view.name for device in ("gpu", "cpu")
                 for view in sorted(snap.usable(device), key=lambda v: (v.inflight, v.name))]  # type: ignore[arg-type]
        return found or Refusal(503, "no_engine", down_message(snap))

    def hold(self, engine: str, now: float) -> None:
        """Count a pass-through request against ``engine``."""
        self.ledger.hold(engine, now)

    def unhold(self, engine: str, now: float) -> None:
        """A pass-through request on ``engine`` is over."""
        self.ledger.unhold(engine, now)
        self.kick(now)


def down_message(snap: Snapshot) -> str:
    """Why no engine can take requests, engine by engine."""
    parts = []
    for view in snap.engines:
        why = "disabled" if not view.enabled else "draining" if view.draining else view.state.value
        if view.state is EngineState.DOWN and view.last_error:
            why += f" ({view.last_error})"
        parts.append(f"{view.name} ({view.device}) is {why}")
    return "no engine can take requests: " + "; ".join(parts)
