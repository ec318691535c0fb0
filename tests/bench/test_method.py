"""The benchmark's method: the capacity search, grid-timestamped traces, several windows."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from bench import _sweep
from bench._measure import Summary
from bench._workloads import Source, requests_at
from sim.traces import grid_of, spread_within_grid


def _summary(rate: float, attainment: float, completed_rps: float | None = None) -> Summary:
    return Summary(offered_rate=rate, requests=100, completed=100, completed_rps=completed_rps or rate,
                   output_tps=0.0, ttft_p50=None, ttft_p99=None, tpot_p50=None, tpot_p99=None, e2e_p99=None,
                   attainment=attainment, goodput=rate * attainment, cpu_request_share=0.0, cpu_token_share=0.0,
                   gpu_util=0.0, cpu_util=0.0, makespan=1.0, rejected=0, timed_out=0, gpu_preemptions=0)


def _gpu(capacity: float, saturated: float = 10.0) -> Callable[[float], Summary]:
    """A fake gpu-only: meets the targets for everyone up to ``capacity``, for nobody above."""
    def at(rate: float) -> Summary:
        if rate >= _sweep.FLOOD_RATE:
            return _summary(rate, 0.0, completed_rps=saturated)
        return _summary(rate, 1.0 if rate <= capacity else 0.0)
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
    found = _sweep.search_capacity(_gpu(0.0))
    assert found["capacity_met"] is False
    assert found["capacity"] == pytest.approx(1.0 / 4**_sweep.DOWN_STEPS, rel=0.01)  # the lowest rate tried


def test_the_median_window_and_the_spread() -> None:
    windows = [(_summary(1.0, a), {"gpu": 1}) for a in (0.5, 0.9, 0.7)]
    summary, _, goodputs = _sweep.median_window(windows)
    assert summary.attainment == 0.7
    assert goodputs == [0.5, 0.9, 0.7]


def test_grid_timestamps_are_recognised() -> None:
    assert grid_of([0.0, 1.0, 1.0, 5.0]) == 1.0
    assert grid_of([0.0, 60.0, 120.0]) == 60.0
    assert grid_of([0.0, 0.25, 1.0]) is None


def test_grid_arrivals_are_spread_within_their_cell_keeping_each_cells_count() -> None:
    gaps = [0.0, 0.0, 1.0, 0.0, 2.0]  # cells 0, 0, 0, 1, 1, 3
    times = spread_within_grid(gaps, 1.0, random.Random(4))
    assert times == sorted(times) and len(set(times)) == 6  # no two simultaneous arrivals left
    rng = random.Random(4)
    moved = sorted(t + rng.random() for t in (0.0, 0.0, 0.0, 1.0, 1.0, 3.0))
    assert [int(t) for t in moved] == [0, 0, 0, 1, 1, 3]  # every arrival stays in its own cell
    assert times == pytest.approx([t - moved[0] for t in moved])


def test_a_grid_trace_replays_without_bursts_of_simultaneous_arrivals() -> None:
    src = Source("t", tuple([0.0, 0.0, 0.0, 1.0] * 20), tuple((100, 10) for _ in range(81)), "test", grid=1.0)
    reqs = requests_at(src, rate=2.0, count=81, seed=1)
    arrivals = [r.arrival for r in reqs]
    assert len(set(arrivals)) == len(arrivals)
    as_recorded = requests_at(Source("t", src.gaps, src.lengths, "test"), rate=2.0, count=81, seed=1)
    assert len({r.arrival for r in as_recorded}) == 21  # without the spread: 4 at a time


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
