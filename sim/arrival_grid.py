"""Arrival timestamps on a coarse grid: finding the grid, and replaying its cells spread or as bursts.

A trace whose timestamps were rounded (every one a whole second, say) records only in
which cell of the grid a request arrived; some traces also carry a millisecond or so of
jitter around each grid point. Replayed as recorded, every cell is a burst of requests
arriving at one instant. :func:`grid_of` finds such a grid from the timestamps alone:
they fall into tight clumps (within ``JITTER`` of one another) whose distances are whole
multiples of one step of at least ``MIN_STEP``, fitted over the whole trace so that a
long trace's drift does not add up. Then a replay chooses, by name (``REPLAYS``):

- ``spread``: each arrival moves uniformly (seeded) within its cell, which keeps every
  cell's count, and so the trace's burstiness at the grid's own scale
  (:func:`spread_within_grid`);
- ``bursts``: each cell arrives as the burst it was recorded as, its jitter kept; when the
  replay is made faster or slower, the cells move and each burst stays as short as it was
  (:func:`scale_keeping_bursts`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: How far (seconds) a timestamp may sit from its grid point and still count as on it.
JITTER = 0.01
#: The finest step taken for a grid: finer timestamps are replayed as recorded.
MIN_STEP = 0.1
#: The fewest occupied cells that can show a grid (fewer fit some step by chance).
MIN_CELLS = 8
#: Resolutions traces are commonly rounded to, coarsest first: taken from two cells on.
ROUND_STEPS: tuple[float, ...] = (60.0, 1.0, 0.1)
#: Steps tried below the smallest distance between clumps (a grid may leave cells empty).
MAX_DIVISOR = 12

Replay = Literal["spread", "bursts"]
REPLAYS: tuple[Replay, ...] = ("spread", "bursts")


@dataclass(frozen=True)
class Grid:
    """A grid of timestamps: a point every ``step`` seconds, one of them at ``origin``."""

    step: float
    origin: float = 0.0

    def cell(self, stamp: float) -> int:
        """The index of the grid point nearest ``stamp``."""
        return round((stamp - self.origin) / self.step)

    def point(self, cell: int) -> float:
        """The time of grid point ``cell``."""
        return self.origin + cell * self.step


def _tolerance(step: float) -> float:
    # a coarse grid tolerates JITTER; a fine one a twentieth of its step (else random
    # timestamps would fit it by chance)
    return min(JITTER, step / 20)


def _clumps(stamps: Sequence[float]) -> list[float]:
    """The first timestamp of every clump of timestamps within ``2 * JITTER`` of it (input sorted)."""
    starts: list[float] = []
    for t in stamps:
        if not starts or t - starts[-1] > 2 * JITTER:
            starts.append(t)
    return starts


def _fit(points: Sequence[float], step: float) -> Grid | None:
    """The grid of ``step`` (refitted) through every point within tolerance, or None."""
    tol = _tolerance(step)
    cells, estimate = [0], step
    for a, b in zip(points, points[1:], strict=False):
        n = round((b - a) / estimate)
        if n < 1 or abs(b - a - n * estimate) > 2 * tol:
            return None
        cells.append(cells[-1] + n)
        # the step over everything so far: its error shrinks as the cells add up
        estimate = (b - points[0]) / cells[-1]
    # least squares through (cell, time): the step over the whole trace, not one gap
    count = len(points)
    mean_c, mean_t = sum(cells) / count, sum(points) / count
    var = sum((c - mean_c) ** 2 for c in cells)
    if var <= 0:
        return None
    fitted = sum((c - mean_c) * (t - mean_t) for c, t in zip(cells, points, strict=True)) / var
    if abs(fitted - step) > tol:  # a step set by two clumps' jitter, not by the grid
        return None
    grid = Grid(fitted, mean_t - fitted * mean_c)
    if any(abs(t - grid.point(c)) > tol for c, t in zip(cells, points, strict=True)):
        return None
    return grid


def grid_of(stamps: Sequence[float]) -> Grid | None:
    """The coarsest grid every timestamp sits on within its jitter, or None (fine-grained).

    From ``MIN_CELLS`` occupied cells on, any step of at least ``MIN_STEP`` that divides
    the smallest distance between clumps (up to ``MAX_DIVISOR`` times) is tried, coarsest
    first; with fewer cells only the usual resolutions (``ROUND_STEPS``) are.
    """
    points = _clumps(sorted(stamps))
    if len(points) < 2:
        return None
    if len(points) < MIN_CELLS:
        candidates = list(ROUND_STEPS)
    else:
        smallest = min(b - a for a, b in zip(points, points[1:], strict=False))
        candidates = [smallest / d for d in range(1, MAX_DIVISOR + 1)]
    for step in candidates:
        if step < MIN_STEP * (1 - 1e-9):
            return None
        grid = _fit(points, step)
        if grid is not None:
            return grid
    return None


def spread_within_grid(stamps: Sequence[float], grid: Grid, rng: random.Random) -> list[float]:
    """Arrival times (from 0, in order) of grid timestamps, each moved uniformly within its cell."""
    moved = sorted(grid.point(grid.cell(t)) + rng.random() * grid.step for t in stamps)
    return [t - moved[0] for t in moved]


def cell_span(stamps: Sequence[float], grid: Grid) -> float:
    """Seconds from the first timestamp's grid point to the last one's (``stamps`` in order)."""
    return (grid.cell(stamps[-1]) - grid.cell(stamps[0])) * grid.step if stamps else 0.0


def scale_keeping_bursts(stamps: Sequence[float], grid: Grid, factor: float) -> list[float]:
    """Arrival times (from 0) of grid timestamps replayed ``factor`` times slower, each cell still one burst.

    The cells' grid points move apart ``factor`` times; each timestamp keeps its own offset
    from its point (its jitter), so a burst lasts as long as it was recorded whatever the
    factor (``stamps`` in order; the result keeps their order).
    """
    if not stamps:
        return []
    first = grid.cell(stamps[0])
    out = [(grid.cell(t) - first) * grid.step * factor + (t - grid.point(grid.cell(t))) for t in stamps]
    base = min(out)
    return [t - base for t in out]
