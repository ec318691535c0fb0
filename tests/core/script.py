"""One history for both drivers of the scheduling core: arrivals, engine acts, world changes.

A script is a list of steps a tenth of a (virtual) second apart, made from a seed: bursts
of arrivals that overflow the GPU's batch limit, engines giving first tokens and ending
answers, the operator turning ``auto_pd_offload`` on (splits) and off, the GPU's KV cache
passing the threshold (the CPU takes over), and one CPU engine going DOWN (idle, after a
quiet spell, so that a driver blind to its state would pick it) and coming back. Late in the
history, after another quiet spell, a burst of sheddable requests fills the GPU and interactive
ones arrive until the line overflows: the sheddable requests give up their GPU slots before
their first token (:mod:`syshaxd.core.revoke`), then the line refuses.
Engine acts name no request: an engine acts on its own oldest request, so what it acts on
follows from where each driver placed the work -- a driver that placed differently plays
out differently, and the comparison shows it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sim.scripted import Action
from sim.traces import TraceRequest
from syshaxd.routing import ServiceLevel

ENGINES = ("gpu0", "cpu0", "cpu1")
STEP = 0.1  # seconds between steps; the runner scrapes every STEP, between them
OFFSET = STEP / 2
BURSTS = 0.04  # share of steps that are a burst of arrivals (the rest: an engine acts)
QUIET_ROUNDS = 40  # rounds of every engine acting, arrivals paused, before an engine goes down
#: The class of the sheddable burst (the daemon's table has it too: :func:`classes`). It serves
#: late work: lateness is wall time in the daemon and script time in the runner.
SHEDDABLE = ServiceLevel("sheddable", priority=2, sheddable=True)
GPU_SLOTS = 4  # decider.gpu_max_batch_size in the parity config
SHED_BURST = GPU_SLOTS
CHAT_BURST = 24  # more than the CPU engines' room and the line's (10) after the GPU is full


@dataclass(frozen=True)
class Arrive:
    """Request ``index`` arrives."""

    at: float
    index: int
    request: TraceRequest


@dataclass(frozen=True)
class Set:
    """The operator changes runtime keys (dotted, as ``syshax set`` takes them)."""

    at: float
    keys: dict[str, Any]


Step = Arrive | Action | Set


@dataclass
class Script:
    """The steps in time order, and each kind apart for the runner."""

    steps: list[Step] = field(default_factory=list)

    @property
    def requests(self) -> list[TraceRequest]:
        """Every arrival, in order."""
        return [s.request for s in self.steps if isinstance(s, Arrive)]

    @property
    def actions(self) -> list[Action]:
        """Every engine act and world change."""
        return [s for s in self.steps if isinstance(s, Action)]

    @property
    def sets(self) -> list[Set]:
        """Every change of runtime keys."""
        return [s for s in self.steps if isinstance(s, Set)]


def make_script(seed: int, requests: int = 520) -> Script:
    """A seeded history of ``requests`` arrivals, the phases above, and a tail that ends every request."""
    rng = random.Random(seed)
    script = Script()
    at = [OFFSET]
    # When the world changes, by how many requests have arrived.
    phases: dict[int, list[tuple[str, Any]]] = {
        int(requests * 0.22): [("set", {"decider.auto_pd_offload": True})],
        int(requests * 0.40): [("kv", ("gpu0", 0.95))],
        int(requests * 0.52): [("kv", ("gpu0", 0.30))],
        int(requests * 0.60): [("down", "cpu1")],
        int(requests * 0.75): [("up", "cpu1")],
        int(requests * 0.85): [("set", {"decider.auto_pd_offload": False})],
        int(requests * 0.90): [("revoke", None)],
    }

    def step(item: Step) -> None:
        script.steps.append(item)
        at[0] += STEP

    def now() -> float:
        return round(at[0], 6)

    arrived = 0

    def arrive(level: ServiceLevel) -> None:
        nonlocal arrived
        step(Arrive(now(), arrived, TraceRequest(now(), rng.randint(20, 300), rng.randint(2, 5), level=level)))
        arrived += 1

    while arrived < requests:
        for kind, value in [c for due in sorted(k for k in phases if k <= arrived) for c in phases.pop(due)]:
            if kind in ("down", "revoke"):  # a quiet spell first: the engine goes down idle, the GPU is empty
                for _ in range(QUIET_ROUNDS):
                    for engine in ENGINES:
                        step(Action(now(), engine, "first"))
                        step(Action(now(), engine, "finish"))
            if kind == "revoke":
                for _ in range(min(SHED_BURST, requests - arrived)):
                    arrive(SHEDDABLE)
                for _ in range(min(CHAT_BURST, requests - arrived)):
                    arrive(ServiceLevel())
            elif kind == "set":
                step(Set(now(), value))
            elif kind == "kv":
                step(Action(now(), value[0], "kv", value[1]))
            else:
                step(Action(now(), value, kind))
        if rng.random() < BURSTS:
            for _ in range(min(requests - arrived, rng.randint(1, 8))):
                arrive(ServiceLevel())
        else:
            step(Action(now(), rng.choice(ENGINES), rng.choice(("first", "finish"))))
    for _ in range(requests):  # the tail: every engine acts until nothing is left
        for engine in ENGINES:
            for kind in ("first", "finish"):
                step(Action(now(), engine, kind))  # type: ignore[arg-type]
    return script


def classes() -> dict[str, Any]:
    """The daemon's class table for the script (``service.classes``)."""
    return {"interactive": {}, SHEDDABLE.name: {"priority": SHEDDABLE.priority, "sheddable": True}}
