"""Small weighted non-negative least squares, exact, without numpy.

The calibration fits at most a handful of constants, so the exact answer is found by
trying every subset of free (non-zero) constants, solving the normal equations on it, and
keeping the best feasible one (2^k subsets for k constants: 8 for the decode fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

Row = Sequence[float]


class FitError(ValueError):
    """Too few or degenerate measurements to fit the constants."""


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        scale = max(abs(v) for row in m for v in row[:n]) or 1.0
        if abs(m[pivot][col]) <= 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _least_squares(rows: Sequence[Row], ys: Sequence[float], cols: Sequence[int]) -> list[float] | None:
    # Columns are scaled to unit norm first: the constants span ten orders of magnitude
    # (seconds per token of attention next to seconds per step).
    norms = [max(sum(r[c] ** 2 for r in rows) ** 0.5, 1e-300) for c in cols]
    a = [[sum(r[ci] * r[cj] for r in rows) / (ni * nj) for cj, nj in zip(cols, norms, strict=True)]
         for ci, ni in zip(cols, norms, strict=True)]
    b = [sum(r[ci] * y for r, y in zip(rows, ys, strict=True)) / ni for ci, ni in zip(cols, norms, strict=True)]
    x = _solve(a, b)
    return None if x is None else [v / n for v, n in zip(x, norms, strict=True)]


def nnls(rows: Sequence[Row], ys: Sequence[float], weights: Sequence[float] | None = None) -> list[float]:
    """Non-negative ``x`` minimising ``sum(w_i * (rows_i . x - y_i)^2)``.

    Raises:
        FitError: no rows, or no subset of constants can be solved.
    """
    if not rows:
        raise FitError("no measurements to fit")
    k = len(rows[0])
    w = list(weights) if weights is not None else [1.0] * len(rows)
    sq = [wi**0.5 for wi in w]
    scaled = [[v * s for v in r] for r, s in zip(rows, sq, strict=True)]
    target = [y * s for y, s in zip(ys, sq, strict=True)]
    best: tuple[float, list[float]] | None = None
    for size in range(k, -1, -1):
        for cols in combinations(range(k), size):
            sol = _least_squares(scaled, target, cols) if cols else []
            if sol is None or any(v < 0 for v in sol):
                continue
            x = [0.0] * k
            for c, v in zip(cols, sol, strict=True):
                x[c] = v
            res = sum((sum(a * b for a, b in zip(r, x, strict=True)) - y) ** 2 for r, y in zip(scaled, target, strict=True))
            if best is None or res < best[0] * (1 - 1e-12):
                best = (res, x)
    if best is None:
        raise FitError("the measurements cannot determine the constants (all fits singular)")
    return best[1]
