"""What a virtual-time run is given and what it tracks of each request.

:class:`RunOptions` are the conductor settings a run uses; a :class:`Flight` is one
request on its way through the runner's conductor (where it is, what it has produced),
and :meth:`Flight.record` its line in the run's results.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sim.report import RequestResult
from sim.traces import TraceRequest
from syshaxd.config import ModelParams, Monitor
from syshaxd.core import Ticket
from syshaxd.engines.rates import LATENCY_WINDOW, RATE_WINDOW
from syshaxd.policy.queueing import QueueOrder
from syshaxd.routing import Decision, Handoff, Limits, RequestFeatures

__all__ = ["Change", "Flight", "RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """The conductor settings a run uses (the config's defaults)."""

    scrape_interval: float = 1.0  # monitor.interval
    rate_window: float = RATE_WINDOW  # the monitor's rates and TPOT/TTFT means (syshaxd.engines.rates)
    latency_window: float = LATENCY_WINDOW
    max_queue: int = 100  # system.max_queue_size
    timeout: float = 600.0  # system.request_timeout
    handoff: Handoff | None = None  # None: limits.handoff
    #: The waiting line's order whatever the policy (None: the policy's own, as in the daemon).
    queue_order: QueueOrder | None = None
    # monitor.startup_check: each engine's test generation before traffic, as the config's defaults
    startup_check: bool = Monitor.model_fields["startup_check"].default
    test_prompt_tokens: int = 2  # models.params.test_prompt ("Hello": one token and BOS)
    test_tokens: int = ModelParams.model_fields["test_tokens"].default
    startup_lead: float = 30.0  # seconds the daemon runs before the first request arrives


@dataclass(frozen=True)
class Change:
    """The operator changes the limits at ``at`` (``syshax set``, the console), during a run."""

    at: float
    limits: Limits


@dataclass(eq=False)
class Flight:
    """One request on its way through the runner's conductor: where it is and what it produced."""

    index: int
    req: TraceRequest
    features: RequestFeatures
    ticket: Ticket
    decision: Decision | None = None
    placement: tuple[str, ...] = ()  # the engines the core placed it on
    held: bool = False  # whether it waited in line
    first_token: float | None = None
    finished: float | None = None
    visible: int = 0
    tokens: Counter[str] = field(default_factory=Counter)  # by device
    devices: set[str] = field(default_factory=set)
    rid: str | None = None
    engine: str | None = None
    segment: int = 0
    split_cpu: str | None = None
    hidden_first: bool = False
    reasks: int = 0
    outcome: str = "ok"
    refusal: str = ""  # the core's reason, or request_timeout
    #: Its class's targets (seconds), as :func:`syshaxd.routing.limits_for` gives them at arrival.
    ttft_target: float = 0.0
    tpot_target: float = 0.0

    @property
    def done(self) -> bool:
        return self.finished is not None or self.outcome != "ok"

    def record(self) -> RequestResult:
        """This request's line in the run's results."""
        route = "none" if not self.devices else "split" if len(self.devices) > 1 else next(iter(self.devices))
        tpot = None
        if self.finished is not None and self.first_token is not None and self.visible > 1:
            tpot = (self.finished - self.first_token) / (self.visible - 1)
        arrival = self.req.arrival
        ttft = None if self.first_token is None else self.first_token - arrival
        met = (self.finished is not None and ttft is not None and ttft <= self.ttft_target
               and (tpot if tpot is not None else 0.0) <= self.tpot_target)
        return RequestResult(
            index=self.index, arrival=arrival, prompt_tokens=self.req.prompt_tokens, output_tokens=self.visible,
            ttft=ttft, tpot=tpot,
            e2e=None if self.finished is None else self.finished - arrival, route=route,
            gpu_tokens=self.tokens["gpu"], cpu_tokens=self.tokens["cpu"], reasks=self.reasks, outcome=self.outcome,
            engines="+".join(self.placement), mode=self.decision.mode.value if self.decision is not None else "",
            held=self.held, level=self.features.level.name, met=met, refusal=self.refusal,
        )
