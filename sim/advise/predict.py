"""One option replayed: the recorded trace through the virtual-time runner under a setting.

A simulated engine started with ``--speed S`` runs its profile S times faster than the wall
clock, so the daemon in front of it saw every duration divided by S and every rate times S.
The replay runs on the profile's own clock: arrivals, the daemon's scrape interval and its
time targets are multiplied by S (rate thresholds divided by S, the CPU token limit's
tokens/s multiplier multiplied by S), and what comes out is divided back. Real engines run
at S = 1. Each request runs in its recorded class at its own targets (:mod:`sim.advise.levels`),
scaled the same way, with the CPU allowed for the classes the setting says (``cpu_flags``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from sim.advise.levels import replayed
from sim.advise.options import Setting
from sim.advise.window import REFUSED, Measured, Outcome, Window, measure, measure_classes
from sim.profile import Profile
from sim.runner import EngineSpec, RunOptions, run
from sim.traces import TraceRequest
from syshaxd.engines.rates import LATENCY_WINDOW, RATE_WINDOW
from syshaxd.routing import Limits, ServiceLevel
from syshaxd.schema import AdviceClass
from syshaxd.snapshot import Device

__all__ = ["Box", "Daemon", "Prediction", "predict"]


@dataclass(frozen=True)
class Box:
    """The engines to replay on: (name, device, profile) each, and the engines' speed."""

    engines: tuple[tuple[str, Device, Profile], ...]
    speed: float = 1.0

    def specs(self) -> list[EngineSpec]:
        """The runner's engine specs."""
        return [EngineSpec(name, device, profile) for name, device, profile in self.engines]

    def gpu_slots(self) -> int:
        """Sequences the smallest GPU engine runs at once (its profile's ``max_num_seqs``)."""
        return min((p.max_num_seqs for _, device, p in self.engines if device == "gpu"), default=1)


@dataclass(frozen=True)
class Daemon:
    """The daemon's settings a replay copies (wall seconds)."""

    scrape_interval: float = 1.0  # monitor.interval
    max_queue: int = 100  # system.max_queue_size
    timeout: float = 600.0  # system.request_timeout


@dataclass(frozen=True)
class Prediction:
    """What a setting comes to on the recorded window."""

    setting: Setting
    measured: Measured
    decisions: dict[str, int]
    classes: dict[str, AdviceClass] = field(default_factory=dict)  # per service class


def _virtual_limits(limits: Limits, speed: float) -> Limits:
    return replace(limits, ttft_target=limits.ttft_target * speed, tpot_target=limits.tpot_target * speed,
                   cpu_throughput_threshold=limits.cpu_throughput_threshold / speed,
                   token_limit_multiplier=limits.token_limit_multiplier * speed)


def _options(daemon: Daemon, speed: float, limits: Limits) -> RunOptions:
    return RunOptions(scrape_interval=daemon.scrape_interval * speed, rate_window=RATE_WINDOW * speed,
                      latency_window=LATENCY_WINDOW * speed,
                      max_queue=daemon.max_queue, timeout=daemon.timeout * speed, handoff=limits.handoff)


def predict(window: Window, setting: Setting, base: Limits, box: Box, daemon: Daemon,
            progress: Callable[[int, int], None] | None = None) -> Prediction:
    """Replay ``window`` under ``setting`` on ``box`` and measure it as the window is measured.

    Args:
        base: the limits the window ran under (targets, thresholds, handoff); the setting
            changes its own keys only.
    """
    s = box.speed
    limits = setting.limits(base)
    levels: dict[ServiceLevel, ServiceLevel] = {}

    def level(recorded: ServiceLevel) -> ServiceLevel:
        if recorded not in levels:
            levels[recorded] = replayed(recorded, s, setting.cpu_allows(recorded.name))
        return levels[recorded]

    trace: Sequence[TraceRequest] = [replace(r, arrival=r.arrival * s, level=level(r.level)) for r in window.trace]
    result = run(trace, box.specs(), setting.policy, _virtual_limits(limits, s),
                 _options(daemon, s, limits), progress)

    def wall(value: float | None) -> float | None:
        return None if value is None else value / s

    outcomes = [
        Outcome(arrival=r.arrival / s, ok=r.outcome == "ok", ttft=wall(r.ttft), tpot=wall(r.tpot), e2e=wall(r.e2e),
                output_tokens=r.output_tokens, cpu=r.cpu_tokens > 0, level=r.level, ttft_target=was.ttft_target,
                tpot_target=was.tpot_target, route="" if r.route == "none" or r.outcome in REFUSED else r.route,
                refused=r.outcome in REFUSED)
        for r, was in zip(sorted(result.requests, key=lambda r: r.index), window.outcomes, strict=True)
    ]
    return Prediction(setting, measure(outcomes, limits.ttft_target, limits.tpot_target), dict(result.decisions),
                      measure_classes(outcomes, limits.ttft_target, limits.tpot_target))
