"""A scripted engine: every first token and every end happens when a script says, not when a model would.

Where a test needs two drivers of the scheduling core to see the very same history -- the
daemon over real sockets and the virtual-time runner -- the engines' timing must not depend
on the machine. A scripted engine keeps its requests in arrival order and acts only when
told: ``first`` gives the oldest request that has not started its first token (and ends a
one-token request), ``finish`` ends the oldest started one with the rest of its tokens.
Its metrics are what the script sets (KV usage; running and waiting read 0, so the
conductor's own counts are what a policy sees), and it can hang (``down``: its scrapes fail
and it answers nothing, so a monitor sees it down) and recover (``up``).

:class:`ScriptQueue` is the pure part, shared by the runner's :class:`ScriptedEngine` and any
HTTP front a test puts before it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sim.seq import Seq, SimRequest, StepResult
from sim.virtual_engine import EngineSpec
from syshaxd.snapshot import EngineMetrics, EngineState, EngineView

Act = Literal["first", "finish"]
WorldAct = Literal["down", "up", "kv"]


@dataclass
class Entry:
    """One request inside a scripted engine."""

    rid: str
    new_tokens: int
    started: bool = False
    finished: bool = False


@dataclass
class ScriptQueue:
    """A scripted engine's requests in arrival order, and what each act does to them."""

    entries: list[Entry] = field(default_factory=list)

    def add(self, rid: str, new_tokens: int) -> Entry:
        """A request arrived."""
        entry = Entry(rid, max(1, new_tokens))
        self.entries.append(entry)
        return entry

    def drop(self, rid: str) -> None:
        """A request left (aborted)."""
        self.entries = [e for e in self.entries if e.rid != rid]

    def act(self, kind: Act) -> tuple[Entry, int] | None:
        """Do ``kind`` to the oldest request it applies to: the entry and the tokens it wrote."""
        for entry in self.entries:
            if kind == "first" and not entry.started:
                entry.started = True
                entry.finished = entry.new_tokens == 1
                self._forget_finished()
                return entry, 1
            if kind == "finish" and entry.started and not entry.finished:
                entry.finished = True
                self._forget_finished()
                return entry, entry.new_tokens - 1
        return None

    def _forget_finished(self) -> None:
        self.entries = [e for e in self.entries if not e.finished]


@dataclass(frozen=True)
class Action:
    """One step of a script: at ``at``, an engine acts, or its world changes."""

    at: float
    engine: str
    kind: Act | WorldAct
    value: float = 0.0  # the KV usage, for ``kv``


class ScriptedEngine:
    """A runner engine (:class:`~sim.virtual_engine.RunEngine`) whose steps a script makes."""

    def __init__(self, spec: EngineSpec, actions: Iterable[Action]) -> None:
        self.spec = spec
        mine = sorted((a for a in actions if a.engine == spec.name), key=lambda a: a.at)
        self._acts = [a for a in mine if a.kind in ("first", "finish")]
        self._world = [a for a in mine if a.kind not in ("first", "finish")]
        self.queue = ScriptQueue()
        self._seqs: dict[str, Seq] = {}
        self.pending: StepResult | None = None
        self.state = EngineState.UP
        self.kv_usage = 0.0
        self.clock = 0.0

    def next_time(self) -> float:
        """When the script next makes this engine act."""
        if self.pending is not None:
            return self.pending.end
        return self._acts[0].at if self._acts else math.inf

    def compute(self, now: float, horizon: float) -> None:
        """Take the next act whose time has come (into ``pending``; None when it finds nothing to do)."""
        while self._acts and self._acts[0].at <= max(now, horizon):
            action = self._acts.pop(0)
            if self.state is EngineState.DOWN:
                continue  # a hung engine answers nothing
            acted = self.queue.act(action.kind)  # type: ignore[arg-type]
            if acted is None:
                continue
            entry, tokens = acted
            seq = self._seqs[entry.rid]
            self.clock = action.at
            finished = [seq] if entry.finished else []
            if entry.finished:
                del self._seqs[entry.rid]
            self.pending = StepResult(start=action.at, end=action.at, steps=1, tokens=[(seq, tokens)] if tokens else [],
                                      finished=finished)
            return

    def accepts(self, context: int, new: int) -> bool:
        """A scripted engine takes every request."""
        return True

    def submit(self, req: SimRequest, now: float) -> None:
        """A request arrived."""
        self.queue.add(req.rid, req.max_new_tokens)
        self._seqs[req.rid] = Seq(req, now, req.context_tokens + req.max_new_tokens)

    def abort(self, rid: str) -> None:
        """A request left."""
        self.queue.drop(rid)
        self._seqs.pop(rid, None)

    def delivered(self, result: StepResult) -> None:
        """Nothing to count: a scripted engine reports no latency histograms."""

    def transfer_time(self, tokens: int) -> float:
        """KV moves in no time."""
        return 0.0

    def scrape(self, now: float) -> None:
        """Apply the world's changes whose time has come."""
        while self._world and self._world[0].at <= now:
            change = self._world.pop(0)
            if change.kind == "kv":
                self.kv_usage = change.value
            else:
                self.state = EngineState.DOWN if change.kind == "down" else EngineState.UP

    def view(self) -> EngineView:
        """The engine as its scrapes show it: the script's KV usage, nothing running or waiting."""
        return EngineView(self.spec.name, self.spec.device, f"script://{self.spec.name}", "vllm-v1", state=self.state,
                          metrics=EngineMetrics(kv_cache_usage=self.kv_usage, running=0, waiting=0))

    def startup_check(self, now: float, prompt_tokens: int, tokens: int) -> None:
        """A scripted engine runs no startup check (the script would have to answer it)."""

    @property
    def busy_time(self) -> float:
        """A scripted engine computes nothing."""
        return 0.0

    @property
    def preemptions(self) -> int:
        """A scripted engine preempts nothing."""
        return 0


def scripted_engines(specs: Sequence[EngineSpec], actions: Sequence[Action]) -> list[ScriptedEngine]:
    """One scripted engine per spec, each with its share of ``actions``."""
    return [ScriptedEngine(spec, actions) for spec in specs]
