"""Mixed interactive and batch traffic for the advise tests: a window recorded by the runner.

"What happened" is the virtual-time runner (the daemon's own scheduling core) playing a seeded
mixed workload on a box under a setting; its per-request results become the records the daemon
would keep (class, own targets, decision, outcome), and advise runs on them in process
(:func:`sim.advise.flow.advise`), as ``syshax advise`` does on the daemon's records.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from sim.advise import check, flow, levels, options, predict, window
from sim.profile import load_profile
from sim.runner import RunOptions, run
from sim.traces import TraceRequest
from syshaxd.routing import Handoff, Limits, RequestFeatures, ServiceLevel, limits_for
from syshaxd.schema import DecisionModel, RequestRecordModel

__all__ = ["Box", "advised", "mixed", "recorded"]


@dataclass(frozen=True)
class Box:
    """Two engines' profiles and the handoff between them."""

    gpu: str
    cpu: str
    handoff: Handoff = "syshax"

    def replay_box(self) -> predict.Box:
        """The box as advise replays on it."""
        return predict.Box((("gpu0", "gpu", load_profile(self.gpu)), ("cpu0", "cpu", load_profile(self.cpu))))


def _lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, median * math.exp(rng.gauss(0.0, sigma)))))


def mixed(rate: float, count: int, batch_share: float, table: dict[str, ServiceLevel], seed: int = 1,
          ) -> list[TraceRequest]:
    """Poisson arrivals at ``rate``/s: chat-like interactive requests (prompts ~1,000 tokens,
    answers ~130, the Azure conversation trace's medians) and, a ``batch_share`` of them,
    summarisation-like batch requests (prompts ~2,700 tokens, answers ~170, the arXiv set's)."""
    rng, at, out = random.Random(seed), 0.0, []
    for _ in range(count):
        at += rng.expovariate(rate)
        if rng.random() < batch_share:
            out.append(TraceRequest(at, _lognormal(rng, 2700, 0.5, 800, 7000), _lognormal(rng, 170, 0.7, 20, 500),
                                    level=table["batch"]))
        else:
            out.append(TraceRequest(at, _lognormal(rng, 1000, 0.9, 50, 4000), _lognormal(rng, 130, 0.9, 5, 600),
                                    level=table["interactive"]))
    return out


def recorded(trace: list[TraceRequest], box: Box, policy: str, limits: Limits) -> list[RequestRecordModel]:
    """The records the daemon would keep of ``trace`` played on ``box`` under ``policy``."""
    result = run(trace, box.replay_box().specs(), policy, limits, RunOptions(handoff=box.handoff))
    out = []
    for r in result.requests:
        req = trace[r.index]
        own = limits_for(limits, RequestFeatures(req.prompt_tokens, req.output_tokens, level=req.level))
        decision = None if not r.engines else DecisionModel(
            time=1000.0 + r.arrival, request_id=f"r{r.index:04d}", device="gpu" if r.route == "gpu" else "cpu",
            mode=r.mode or "whole", reason="recorded by the runner", policy=policy, service_class=r.level)
        out.append(RequestRecordModel(
            request_id=f"r{r.index:04d}", arrival=1000.0 + r.arrival, kind="completion", stream=True,
            prompt_tokens=r.prompt_tokens, max_tokens=req.output_tokens, output_tokens=r.output_tokens or None,
            outcome=r.outcome, decision=decision, limits=asdict(own), ttft=r.ttft, tpot=r.tpot, e2e=r.e2e or 0.0,
            service_class=r.level, ttft_target=own.ttft_target, tpot_target=own.tpot_target, met=r.met))
    return out


def advised(records: list[RequestRecordModel], box: Box, table: levels.ClassTable, limits: Limits) -> flow.Advised:
    """advise on ``records`` (forced: the tests read the choice, not the self-check)."""
    win = window.window_of(records, table)
    base = options.base_limits(win.limits)
    base = Limits(**{**asdict(base), "ttft_target": limits.ttft_target, "tpot_target": limits.tpot_target})
    current = options.current_setting(win.policy or "adaptive", base)
    replay_box = box.replay_box()

    def replay(settings: list[options.Setting]) -> list[predict.Prediction]:
        return [predict.predict(win, s, base, replay_box, predict.Daemon()) for s in settings]

    case = flow.Case(win, table, base, current, replay_box.gpu_slots(), {"gpu": box.gpu, "cpu": box.cpu})
    return flow.advise(case, check.Bounds(), replay, force=True)  # type: ignore[arg-type]
