"""The scheduling benchmark's plan: find capacities, measure each device alone, sweep policies.

Three phases, each a batch of independent runs spread over worker processes:

1. **GPU-only capacity** per workload and GPU profile: the highest offered rate at which
   ``gpu-only`` meets both targets for ``CAPACITY_SHARE`` of the requests (median over the
   trace windows). The search starts between a tenth of and the GPU's saturated
   throughput; when ``gpu-only`` already misses at the bottom, it brackets downward
   (a quarter at a time, ``DOWN_STEPS`` times) before it bisects. When no rate meets the
   share it says so (``capacity_met`` false): it stops going down where less load no
   longer helps, and the sweep is based on the highest rate that keeps ``CAPACITY_SHARE``
   of the best attainment seen (:func:`search_capacity`).
2. **The CPU alone** per workload and CPU profile: ``cpu-only`` at fractions of the CPU's
   saturated throughput; its best goodput.
3. **The sweep**: every policy at ``SWEEP`` multiples of the GPU-only capacity.

The ceiling of a scenario is the GPU's best ``gpu-only`` goodput (over every rate tried)
plus the CPU's best ``cpu-only`` goodput. Every point is measured over several trace
windows (``Settings.seeds``: each seed picks a window and its Poisson arrivals) and
reported as the median window with the spread (min, max) of goodput beside it. A run is a
pure function of its task, so the same seeds give the same report whatever the number of
workers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import _mixed, _workloads
from bench._measure import Summary, summarise
from bench._run import RunSpec, execute
from bench._scenarios import SCENARIOS, policy_function, uses_cpu
from sim import timing
from sim.arrival_grid import Replay
from sim.profile import load_profile
from syshaxd.config import Handoff

CAPACITY_SHARE = 0.9
#: Bisection steps of the capacity search (the bracket shrinks 2^n times).
CAPACITY_STEPS = 6
#: Steps (each a quarter of the rate before) the capacity search may bracket downward.
DOWN_STEPS = 5
#: Attainment a quarter of the load must gain for the capacity search to keep going down.
PLATEAU = 0.02
#: Share of the offered rate a run must complete to count as keeping up with its load.
KEEPS_UP = 0.9
#: Offered rate that saturates any engine here: every request arrives within seconds.
FLOOD_RATE = 1000.0
#: Multiples of the CPU's one-at-a-time service rate tried for the CPU alone.
CPU_FACTORS = (0.5, 1.0, 2.0, 4.0)
#: The CPU alone serves few requests an hour: fewer requests keep its runs short.
CPU_ALONE_REQUESTS = 100


@dataclass(frozen=True)
class Settings:
    """Everything a run depends on (picklable: workers rebuild workloads from it)."""

    traces: Path
    seeds: tuple[int, ...]
    requests: int
    ttft_target: float
    tpot_target: float
    handoff: Handoff
    replay: Replay = "spread"  # a trace's grid cells: spread within them, or kept as bursts
    #: Seconds of traffic a run offers at least (0: ``requests`` alone decides): a run of
    #: loose targets (a minute to the first token) must last long enough for its queue to
    #: grow past them once the offered rate passes capacity.
    window: float = 0.0


@functools.lru_cache(maxsize=8)
def _source(name: str, traces: Path, replay: Replay) -> _workloads.Source:
    return _workloads.load(name, traces, replay)


def workload_requests(settings: Settings, workload: str, rate: float, count: int, seed: int
                      ) -> list[_workloads.Request]:
    """``count`` requests of ``workload`` (a trace's, or a mixed workload's) offered at ``rate``."""
    if _mixed.is_mixed(workload):
        return _mixed.mixed_requests(workload, _source("azure-conv", settings.traces, settings.replay),
                                     _source("arxiv", settings.traces, settings.replay), rate, count, seed)
    return _workloads.requests_at(_source(workload, settings.traces, settings.replay), rate, count, seed)


def run_count(settings: Settings, workload: str, rate: float) -> int:
    """Requests of one run: ``settings.requests``, or more to offer ``settings.window`` seconds of traffic
    (a flood, which only measures throughput, keeps ``settings.requests``)."""
    count = _workloads.run_size(workload, settings.requests)
    if settings.window > 0 and rate < FLOOD_RATE:
        count = max(count, math.ceil(rate * settings.window))
    return count


def measure_windows(settings: Settings, workload: str, gpu: str | None, cpu: str | None, policy: str, rate: float
                    ) -> list[tuple[Summary, dict[str, int]]]:
    """One policy at one offered rate over every trace window of ``settings.seeds``."""
    return [measure(settings, workload, gpu, cpu, policy, rate, seed) for seed in settings.seeds]


def median_window(windows: list[tuple[Summary, dict[str, int]]]) -> tuple[Summary, dict[str, int], list[float]]:
    """The window of median goodput (the lower one of an even count), and every window's goodput."""
    ranked = sorted(windows, key=lambda w: w[0].goodput)
    summary, decisions = ranked[(len(ranked) - 1) // 2]
    return summary, decisions, [w[0].goodput for w in windows]


def measure(settings: Settings, workload: str, gpu: str | None, cpu: str | None, policy: str, rate: float,
            seed: int) -> tuple[Summary, dict[str, int]]:
    """Run one policy at one offered rate on the window of ``seed``; its summary and decisions by kind."""
    reqs = workload_requests(settings, workload, rate, run_count(settings, workload, rate), seed)
    spec = RunSpec(gpu_profile=gpu, cpu_profile=cpu, policy=policy_function(policy), ttft_target=settings.ttft_target,
                   tpot_target=settings.tpot_target, handoff=settings.handoff)
    result = execute(spec, reqs)
    summary = summarise(result.outcomes, offered_rate=rate, ttft_target=settings.ttft_target,
                        tpot_target=settings.tpot_target, gpu_busy=result.gpu_busy, cpu_busy=result.cpu_busy,
                        gpu_preemptions=result.gpu_preemptions)
    return summary, result.decisions


def _sig(value: float) -> float:
    """Three significant digits: capacities print and compare cleanly."""
    return float(f"{value:.3g}")


def gpu_capacity(settings: Settings, workload: str, gpu: str) -> dict[str, Any]:
    """Phase 1: the GPU-only capacity of one GPU profile on one workload, and its best goodput."""
    return search_capacity(lambda rate: median_window(measure_windows(settings, workload, gpu, None, "gpu-only", rate))[0])


def search_capacity(measure_at: Callable[[float], Summary]) -> dict[str, Any]:
    """The capacity search over ``measure_at(rate)`` (gpu-only's median window at that rate).

    When no rate meets ``CAPACITY_SHARE``, it says so (``capacity_met`` false) and stops
    going down once the GPU keeps up with the load (completes ``KEEPS_UP`` of the offered
    rate) and a quarter of the load gains less than ``PLATEAU`` of attainment: the misses
    that are left are not the load's (a burst that overflows the GPU at any rate).
    The capacity is then the highest rate that keeps ``CAPACITY_SHARE`` of the best
    attainment seen (``attainment_floor``): where the load starts to cost, which the sweep
    is based on.
    """
    tried: dict[float, Summary] = {}

    def at(rate: float) -> Summary:
        rate = _sig(rate)
        if rate not in tried:
            tried[rate] = measure_at(rate)
        return tried[rate]

    # A flood's throughput brackets the capacity; timeouts can make it low, so grow the top.
    saturated = at(FLOOD_RATE).completed_rps
    lo, hi = saturated / 10, saturated
    for _ in range(4):
        if at(hi).attainment < CAPACITY_SHARE:
            break
        lo, hi = hi, hi * 2
    for _ in range(DOWN_STEPS):
        if at(lo).attainment >= CAPACITY_SHARE:
            break
        # the GPU keeps up with the load and a quarter of it gains nothing: the misses are not the load's
        plateau = at(lo).completed_rps >= KEEPS_UP * lo and at(lo / 4).attainment < at(lo).attainment + PLATEAU
        lo, hi = lo / 4, lo  # the bottom misses too: bracket downward
        if plateau:
            break
    met = at(lo).attainment >= CAPACITY_SHARE
    sustained = {r: s for r, s in tried.items() if r != FLOOD_RATE}
    floor = max(s.attainment for s in sustained.values())
    goal = CAPACITY_SHARE if met else CAPACITY_SHARE * floor
    if not met:  # bisect between the best attainment's rate and the next rate tried above it that misses the goal
        lo = min(r for r, s in sustained.items() if s.attainment == floor)
        hi = min((r for r, s in tried.items() if r > lo and s.attainment < goal), default=FLOOD_RATE)
    for _ in range(CAPACITY_STEPS if floor > 0 else 0):
        mid = _sig((lo + hi) / 2)
        if mid in (_sig(lo), _sig(hi)):
            break
        if at(mid).attainment >= goal:
            lo = mid
        else:
            hi = mid
    # A flood's goodput (its rate times the few that met the targets) is no sustainable rate.
    best = max((s for r, s in tried.items() if r != FLOOD_RATE), key=lambda s: s.goodput)
    return {"capacity": _sig(lo), "capacity_met": met, "attainment_floor": floor, "capacity_goal": goal,
            "saturated_rps": saturated, "best_goodput": best.goodput, "best_rate": best.offered_rate,
            "tried": {str(r): s.attainment for r, s in sorted(tried.items())}}


def cpu_service_rate(settings: Settings, workload: str, cpu: str) -> float:
    """Requests/s the CPU finishes one at a time: the mean of prefill + decode of the workload's requests.

    The CPU's prefill does not gain from batching (it is compute-bound), and on these
    traces the prefill is most of a request's CPU time, so this is close to its capacity.
    """
    profile = load_profile(cpu)
    reqs = workload_requests(settings, workload, 1.0, CPU_ALONE_REQUESTS, settings.seeds[0])
    total = sum(timing.prefill_time(profile, r.prompt_tokens)
                + r.output_tokens * timing.decode_step_time(profile, [r.prompt_tokens + r.output_tokens // 2])
                for r in reqs)
    return len(reqs) / total


def cpu_alone(settings: Settings, workload: str, cpu: str) -> dict[str, Any]:
    """Phase 2: ``cpu-only`` at multiples of the CPU's one-at-a-time rate; the best goodput."""
    base = cpu_service_rate(settings, workload, cpu)
    small = replace(settings, requests=min(settings.requests, CPU_ALONE_REQUESTS), window=0.0)
    tried = [median_window(measure_windows(small, workload, None, cpu, "cpu-only", _sig(base * f)))[0]
             for f in CPU_FACTORS]
    best = max(tried, key=lambda s: s.goodput)
    return {"service_rate": base, "best_goodput": best.goodput, "best_rate": best.offered_rate,
            "best_attainment": best.attainment, "requests": small.requests,
            "tried": {str(s.offered_rate): s.goodput for s in tried}}


def sweep_run(settings: Settings, workload: str, gpu: str, cpu: str | None, policy: str, factor: float, rate: float
              ) -> dict[str, Any]:
    """Phase 3: one policy at one rate of the sweep on one pair of engines."""
    windows = measure_windows(settings, workload, gpu, cpu, policy, rate)
    summary, decisions, goodputs = median_window(windows)
    out = {"policy": policy, "rate_factor": factor, **summary.as_dict(), "decisions": decisions,
           "goodput_windows": goodputs, "goodput_min": min(goodputs), "goodput_max": max(goodputs)}
    if summary.by_class:  # each class's goodput in every window (window i replays the same requests for every policy)
        out["class_goodput_windows"] = {k: [_class_goodput(w[0], k) for w in windows] for k in summary.by_class}
    return out


def _class_goodput(summary: Summary, klass: str) -> float:
    value = summary.by_class.get(klass, {}).get("goodput", 0.0)
    return float(value) if isinstance(value, (int, float)) else 0.0


Task = tuple[Callable[..., dict[str, Any]], tuple[Any, ...]]


def run_all(tasks: Iterable[Task], jobs: int, on_done: Callable[[], None]) -> list[dict[str, Any]]:
    """Run tasks (in worker processes when ``jobs`` > 1); results in task order."""
    tasks = list(tasks)
    if jobs <= 1:
        out = []
        for fn, args in tasks:
            out.append(fn(*args))
            on_done()
        return out
    results: dict[int, dict[str, Any]] = {}
    pool: Executor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures: dict[Future[dict[str, Any]], int] = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(tasks)}
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            on_done()
    return [results[i] for i in range(len(tasks))]


#: Runs a titled batch of tasks (with a progress bar); results in task order.
Phase = Callable[[str, list[Task]], list[dict[str, Any]]]
#: (workload, scenario, policy, rate factor) -> that sweep run's result.
Swept = Callable[[str, str, str, float], dict[str, Any]]


def policy_sweep(plan: dict[str, Any], settings: Settings, capacity: dict[tuple[str, str], dict[str, Any]],
                 phase: Phase, title: str) -> Swept:
    """Every policy of the plan at every rate factor of its GPU-only capacity, on every workload
    and scenario, as one phase. A policy that never touches the CPU (gpu-only, gpu-held) runs once
    per GPU profile and serves every scenario with it."""

    def identity(w: str, s: str, policy: str, f: float) -> tuple[str, str, str | None, str, float]:
        sc = SCENARIOS[s]
        return (w, sc.gpu_profile, sc.cpu_profile if uses_cpu(policy) else None, policy, f)

    unique: dict[tuple[str, str, str | None, str, float], Task] = {}
    for w in plan["workloads"]:
        for s in plan["scenarios"]:
            cap = capacity[(w, SCENARIOS[s].gpu_profile)]["capacity"]
            for policy in plan["policies"]:
                for f in plan["sweep"]:
                    key = identity(w, s, policy, f)
                    unique.setdefault(key, (sweep_run, (settings, w, key[1], key[2], policy, f, cap * f)))
    swept = dict(zip(unique, phase(title, list(unique.values())), strict=True))
    return lambda w, s, policy, f: swept[identity(w, s, policy, f)]
