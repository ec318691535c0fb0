"""What the scheduling core keeps of one request, and the values its decisions come out as.

A :class:`Ticket` is made by a driver when a request arrives and handed to the
:class:`~syshaxd.core.scheduler.Scheduler` with every event of its life. The scheduler
answers with a :class:`Placement` (where it runs now), a :class:`Refusal` (why it never
will), or nothing (it waits in line; the ticket's ``wake`` callback hears the outcome).
A placed ticket may later be taken back (:mod:`syshaxd.core.revoke`): its driver hears that
through the ticket's ``revoke`` callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from syshaxd.routing import Decision, Limits, RequestFeatures
from syshaxd.snapshot import Snapshot

#: A ticket's lane in the waiting line.
NOT_WAITING, ON_TIME, LATE = 0, 1, 2


@dataclass(frozen=True)
class Placement:
    """Where a request runs: the decision as carried out, and the engines it holds.

    ``engines`` is one name for a whole request, ``(gpu, cpu)`` for a prefill/decode split.
    ``decision`` is the policy's, amended when the core had to fall back (the reason says so).
    """

    decision: Decision
    engines: tuple[str, ...]
    #: Whether the request waited in line before it was placed.
    waited: bool = False


@dataclass(frozen=True)
class Refusal:
    """Why a request will not run: an HTTP status, a machine-readable reason and a message.

    ``reason`` is one of ``queue_full``, ``shed`` (a more important request took its place in
    line, or its GPU slot before its first byte),
    ``ttft_expired`` (it can no longer meet its TTFT target and its class refuses late work),
    ``no_engine``, ``stopping``, ``queue_timeout``.
    """

    status: int
    reason: str
    message: str
    retry_after: int | None = None

    @property
    def outcome(self) -> str:
        """How the request is recorded: ``timeout`` (504), ``rejected`` (4xx), else ``error``."""
        return "timeout" if self.status == 504 else "rejected" if self.status < 500 else "error"


Outcome = Placement | Refusal
Wake = Callable[[Outcome], None]
#: How a driver hears that the core took back a placed request (its refusal).
Revoke = Callable[[Refusal], None]


@dataclass(eq=False)
class Ticket:
    """One request from its arrival to its end, as the core accounts for it.

    Tickets compare by identity: the ledger keys its per-request entries by them.
    """

    request_id: str
    features: RequestFeatures
    arrived: float  # the driver's clock
    deadline: float  # arrived + system.request_timeout
    priority: int = 0  # lower first
    #: Engines it is counted against (in flight), and those of them it has not started on.
    holds: set[str] = field(default_factory=set)
    unstarted: set[str] = field(default_factory=set)
    #: The TPOT target it was placed under (its class's, or the decider's then).
    tpot_target: float | None = None
    #: Engine-seconds it was given by each engine it held (complete once released there).
    shares: dict[str, float] = field(default_factory=dict)
    placement: Placement | None = None
    #: Why it never ran; for a placed ticket the core took back, why it was taken back.
    refusal: Refusal | None = None
    #: What the policy saw when it placed the ticket, the limits it applied, and when.
    seen: Snapshot | None = None
    limits: Limits | None = None
    decided: float | None = None
    resubmitted: bool = False
    #: Why it waits, while it does (the policy's reason, or the line ahead of it).
    held: str | None = None
    done: bool = False
    # -- the waiting line's bookkeeping (syshaxd.core.line) --
    seq: int = 0
    placing: int = 0  # how many times it was placed in a lane (older heap entries are stale)
    lane: int = NOT_WAITING
    #: The core's state version at which the policy last held it (-1: not asked since).
    asked: int = -1
    wake: Wake | None = None
    #: Set by a driver that can take back a placed request before its first byte (abort it at
    #: the engine, answer its client with the refusal); None: the core never takes it back.
    revoke: Revoke | None = None

    @property
    def outcome(self) -> Outcome | None:
        """How admission ended for it, once it has."""
        return self.placement if self.placement is not None else self.refusal

    @property
    def revoked(self) -> bool:
        """Whether the core took it back after placing it."""
        return self.placement is not None and self.refusal is not None
