"""The benchmark's method: the capacity search, grid-timestamped traces, several windows."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from bench import _sweep
from bench._measure import Summary
from bench._workloads import BURST_CELL, Source, bursts, requests_at
from sim.arrival_grid import Grid, grid_of


def _summary(rate: float, attainment: float, completed_rps: float | None = None) -> Summary:
    return Summary(offered_rate=rate, requests=100, completed=100, completed_rps=rate if completed_rps is None else completed_rps,
                   output_tps=0.0, ttft_p50=None, ttft_p99=None, ttft_p99_finished=None, tpot_p50=None, tpot_p99=None, e2e_p99=None,
                   attainment=attainment, goodput=rate * attainment, cpu_request_share=0.0, cpu_token_share=0.0,
                   gpu_util=0.0, cpu_util=0.0, makespan=1.0, rejected=0, timed_out=0, gpu_preemptions=0)


def _gpu(capacity: float, saturated: float = 10.0) -> Callable[[float], Summary]:
    """A fake gpu-only: meets the targets for everyone up to ``capacity``; above it, overloaded, for nobody."""
    def at(rate: float) -> Summary:
        if rate >= _sweep.FLOOD_RATE:
            return _summary(rate, 0.0, completed_rps=saturated)
        return _summary(rate, 1.0, completed_rps=rate) if rate <= capacity else _summary(rate, 0.0, completed_rps=capacity)
    return at


def test_capacity_inside_the_first_bracket_is_found_by_bisection() -> None:
    found = _sweep.search_capacity(_gpu(3.0))
    assert found["capacity_met"] and 2.7 <= found["capacity"] <= 3.0


def test_capacity_below_the_first_bracket_is_found_by_bracketing_downward() -> None:
    # Saturated at 10 req/s, the search starts at 1 req/s: the capacity is far below it.
    found = _sweep.search_capacity(_gpu(0.05))
    assert found["capacity_met"]
    assert 0.045 <= found["capacity"] <= 0.05
    assert found["best_goodput"] == pytest.approx(found["capacity"], rel=1e-9)


def test_no_rate_meeting_the_targets_is_said_not_reported_as_a_capacity() -> None:
    found = _sweep.search_capacity(_gpu(0.0))  # overloaded at every rate: it goes down all the way
    assert found["capacity_met"] is False
    assert found["attainment_floor"] == 0.0
    assert found["capacity"] == pytest.approx(1.0 / 4**_sweep.DOWN_STEPS, rel=0.01)  # the lowest rate tried


def _bursty_gpu(floor: float, knee: float, saturated: float = 10.0) -> Callable[[float], Summary]:
    """A fake gpu-only on bursts: ``floor`` of the requests at any low rate, falling off past ``knee``."""
    def at(rate: float) -> Summary:
        if rate >= _sweep.FLOOD_RATE:
            return _summary(rate, 0.0, completed_rps=saturated)
        if rate <= knee:
            return _summary(rate, floor, completed_rps=rate)
        return _summary(rate, floor * knee / rate / 2, completed_rps=knee)
    return at


def test_with_bursts_that_miss_at_any_rate_the_sweep_is_based_on_where_the_load_starts_to_cost() -> None:
    found = _sweep.search_capacity(_bursty_gpu(0.7, 0.3))
    assert found["capacity_met"] is False
    assert found["attainment_floor"] == 0.7
    assert found["capacity_goal"] == pytest.approx(0.9 * 0.7)
    assert 0.27 <= found["capacity"] <= 0.3  # the knee, not the lowest rate tried
    # one quarter down showed the GPU keeping up and gaining nothing: no bisection towards zero
    assert min(float(r) for r in found["tried"]) == pytest.approx(10.0 / 10 / 4 / 4, rel=0.01)


def test_the_median_window_and_the_spread() -> None:
    windows = [(_summary(1.0, a), {"gpu": 1}) for a in (0.5, 0.9, 0.7)]
    summary, _, goodputs = _sweep.median_window(windows)
    assert summary.attainment == 0.7
    assert goodputs == [0.5, 0.9, 0.7]


def test_a_grid_trace_replays_without_bursts_of_simultaneous_arrivals() -> None:
    src = Source("t", tuple([0.0, 0.0, 0.0, 1.0] * 20), tuple((100, 10) for _ in range(81)), "test", grid=Grid(1.0))
    reqs = requests_at(src, rate=2.0, count=81, seed=1)
    arrivals = [r.arrival for r in reqs]
    assert len(set(arrivals)) == len(arrivals)
    as_recorded = requests_at(Source("t", src.gaps, src.lengths, "test"), rate=2.0, count=81, seed=1)
    assert len({r.arrival for r in as_recorded}) == 21  # without the spread: 4 at a time


def _azure_like(n: int = 400) -> Source:
    rng = random.Random(7)
    gaps = tuple(rng.expovariate(5.0) for _ in range(n - 1))  # ~5 req/s, sub-second timestamps
    return Source("azure-conv", gaps, tuple((100 + i, 10) for i in range(n)), "test")


def test_the_bursty_workload_groups_arrivals_into_cells_replayed_as_bursts_at_any_rate() -> None:
    plain = _azure_like()
    bursty = bursts(plain)
    assert bursty.replay == "bursts" and bursty.grid is not None
    assert bursty.grid.step == pytest.approx(BURST_CELL, abs=1e-4)  # found again, jitter and all
    assert sorted(bursty.lengths) == sorted(plain.lengths)
    for rate in (0.05, 1.0, 20.0):
        arrivals = [r.arrival for r in requests_at(bursty, rate=rate, count=200, seed=3)]
        groups: list[list[float]] = []
        for t in arrivals:
            if groups and t - groups[-1][0] < 0.01:
                groups[-1].append(t)
            else:
                groups.append([t])
        assert max(len(g) for g in groups) >= 8  # ~10 requests per 2 s cell at 5 req/s
        assert all(max(g) - min(g) <= 0.001 for g in groups)  # each burst within its millisecond
        assert len(groups) < 40 and sum(len(g) for g in groups) == 200
    assert grid_of([r.arrival for r in requests_at(bursty, rate=1.0, count=200, seed=3)]) is not None


def _run(policy: str, factor: float, windows: list[float]) -> dict[str, object]:
    return {"policy": policy, "rate_factor": factor, "goodput": sorted(windows)[1], "goodput_windows": windows}


def test_adaptive_is_held_to_the_better_baseline_in_every_window_with_one_percent_of_slack() -> None:
    from bench._findings import versus_baselines

    block = {"runs": [
        _run("gpu-only", 1.0, [1.0, 1.0, 1.0]), _run("classic", 1.0, [0.5, 1.2, 0.5]),
        _run("adaptive", 1.0, [0.995, 1.17, 1.5]),  # -0.5% vs gpu-only: fine; -2.5% vs classic: a miss
    ]}
    held, total, worst = versus_baselines(block)
    assert (held, total) == (2, 3)
    assert worst == "-3% vs classic at 1x, window 2 (1.170 vs 1.200 req/s)"
