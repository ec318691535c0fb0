"""Timestamps on a coarse grid: found with their jitter, spread within their cells or replayed as bursts."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sim.arrival_grid import Grid, cell_span, grid_of, scale_keeping_bursts, spread_within_grid
from sim.traces import load_trace


def _jittered(step: float, cells: list[int], per_cell: int, jitter: float, seed: int = 1, origin: float = 0.0
              ) -> list[float]:
    rng = random.Random(seed)
    return sorted(origin + c * step + rng.random() * jitter for c in cells for _ in range(per_cell))


def test_exact_grids_of_the_usual_resolutions_are_found_from_two_cells() -> None:
    assert grid_of([0.0, 1.0, 1.0, 5.0]) == Grid(1.0, 0.0)
    assert grid_of([0.0, 60.0, 120.0]) == Grid(60.0, 0.0)
    found = grid_of([i * 0.1 for i in range(50)])
    assert found is not None and found.step == pytest.approx(0.1)


def test_fine_grained_or_unusual_few_timestamps_have_no_grid() -> None:
    assert grid_of([0.0, 0.25, 1.0]) is None  # a 0.25 s grid needs more cells to show
    assert grid_of([i * 0.05 for i in range(100)]) is None  # finer than the finest step taken
    rng = random.Random(3)
    assert grid_of(sorted(rng.random() * 600 for _ in range(2000))) is None  # sub-second, as recorded


def test_a_grid_with_a_millisecond_of_jitter_is_found_with_its_step() -> None:
    # bursts every 2 s (some cells empty), each request up to 1 ms after its grid point
    rng = random.Random(5)
    cells = sorted(rng.sample(range(2000), 400))
    found = grid_of(_jittered(2.0, cells, 3, 0.001, origin=1_700_000_000.0))
    assert found is not None
    assert found.step == pytest.approx(2.0, abs=1e-5)
    # the exact old rule found no grid here: not every timestamp is a multiple of any step
    assert grid_of(_jittered(2.0, cells, 3, 0.03)) is None  # 30 ms of jitter is no grid


def test_the_step_is_fitted_over_the_whole_trace_not_one_gap() -> None:
    # cells far apart (up to 40 steps): a step taken from one jittered gap would drift off the grid
    cells = [0, 1, 41, 42, 80, 120, 121, 160, 200, 240, 241, 280]
    found = grid_of(_jittered(3.0, cells, 2, 0.002, seed=9))
    assert found is not None and found.step == pytest.approx(3.0, abs=1e-4)


def test_spread_moves_each_arrival_within_its_own_cell() -> None:
    grid = Grid(2.0, 0.0)
    stamps = _jittered(2.0, [0, 0, 1, 4], 3, 0.001)
    times = spread_within_grid(stamps, grid, random.Random(4))
    assert times == sorted(times) and len(set(times)) == len(times)  # no simultaneous arrivals left
    cells = sorted(grid.cell(t) for t in stamps)
    first = min(grid.point(c) for c in cells)
    rng = random.Random(4)
    moved = sorted(grid.point(grid.cell(t)) + rng.random() * 2.0 for t in stamps)
    assert [int((t - first) // 2.0) for t in moved] == cells  # every arrival stays in its own cell
    assert times == pytest.approx([t - moved[0] for t in moved])


def test_bursts_stay_bursts_when_the_replay_is_slowed_or_sped_up() -> None:
    grid = Grid(2.0, 0.0)
    stamps = _jittered(2.0, [0, 1, 5], 4, 0.001)
    assert cell_span(stamps, grid) == 10.0
    for factor in (0.1, 1.0, 30.0):
        times = scale_keeping_bursts(stamps, grid, factor)
        assert min(times) == 0.0
        bursts = [times[i:i + 4] for i in range(0, 12, 4)]
        assert all(max(b) - min(b) < 0.001 for b in bursts)  # each burst as short as recorded
        assert bursts[2][0] - bursts[0][0] == pytest.approx(10.0 * factor, abs=0.001)  # the cells moved


def _mooncake(path: Path, stamps: list[float]) -> None:
    path.write_text("".join(json.dumps({"timestamp": t * 1000, "input_length": 100, "output_length": 10}) + "\n"
                            for t in stamps), encoding="utf-8")


def test_a_trace_on_a_jittered_grid_is_spread_unless_bursts_are_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "bursty.jsonl"
    _mooncake(path, _jittered(2.0, list(range(0, 40, 2)), 5, 0.001))  # 20 bursts of 5, 4 s apart
    spread = [r.arrival for r in load_trace(str(path), rate=1.0, seed=2)]
    assert min(b - a for a, b in zip(spread, spread[1:], strict=False)) > 0.0005  # no burst left
    kept = [r.arrival for r in load_trace(str(path), rate=1.0, seed=2, replay="bursts")]
    assert [round(t, 2) for t in kept[:5]] == [0.0] * 5  # a burst of five, within its millisecond
    # 100 requests at 1 req/s: the last burst 99 s after the first, the cells evenly apart
    assert kept[-5] - kept[0] == pytest.approx(99.0, abs=0.002)
    assert kept[5] - kept[0] == pytest.approx(99.0 / 19, abs=0.002)
