"""A small world for the scheduling core's tests: engines in a snapshot, limits and a policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from syshaxd.core import EngineBook, Scheduler
from syshaxd.routing import Decision, Limits, Mode, Policy, RequestFeatures
from syshaxd.snapshot import Device, EngineMetrics, EngineState, EngineView, Snapshot


def view(name: str, device: Device, state: EngineState = EngineState.UP, capacity: int | None = None) -> EngineView:
    """An engine as the monitor observed it."""
    return EngineView(name, device, f"http://{name}", "vllm-v1", state=state,
                      metrics=EngineMetrics(kv_capacity_tokens=capacity))


@dataclass
class World:
    """What the core reads (``syshaxd.core.Inputs``), changed by hand; counts the policy's calls."""

    engines: list[EngineView]
    rule: Policy
    limits_: Limits = field(default_factory=Limits)
    policy_name: str = "test"
    flags: dict[str, tuple[bool, bool]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    _snap: Snapshot | None = None

    def observed(self) -> Snapshot:
        if self._snap is None:
            self._snap = Snapshot(taken_at=0.0, engines=tuple(self.engines))
        return self._snap

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        return self.flags.get(name, (True, False))

    def limits(self) -> Limits:
        return self.limits_

    def policy(self, snap: Snapshot, features: RequestFeatures, limits: Limits) -> Decision:
        self.calls.append(features.request_id)
        return self.rule(snap, features, limits)

    def set_state(self, name: str, state: EngineState) -> None:
        """A new scrape: ``name`` is now in ``state``."""
        self.engines = [replace(e, state=state) if e.name == name else e for e in self.engines]
        self._snap = None

    def scheduler(self, queue_limit: int = 10, timeout: float = 600.0, order: str | None = None) -> Scheduler:
        books = [EngineBook(e.name, e.device) for e in self.engines]
        return Scheduler(books, self, queue_limit=queue_limit, request_timeout=timeout,
                         policies={"test": self.policy}, order=order)  # type: ignore[arg-type]


def features(rid: str, prompt: int = 100, max_tokens: int = 50, **kw: object) -> RequestFeatures:
    """A request's features."""
    return RequestFeatures(prompt_tokens=prompt, max_tokens=max_tokens, request_id=rid, **kw)  # type: ignore[arg-type]


def upto(device: Device, most: int, mode: Mode = Mode.WHOLE, engine: str | None = None) -> Policy:
    """A policy: ``device`` while it holds fewer than ``most`` requests, else hold."""
    def rule(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        if sum(e.inflight for e in snap.on(device)) >= most:
            return Decision(None, mode, None, f"{device} full")
        return Decision(device, mode, None, f"{device} has room", engine=engine)
    return rule


Rule = Callable[[Snapshot, RequestFeatures, Limits], Decision]
