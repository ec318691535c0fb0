"""Figures as an operator reads them: durations in milliseconds below a second, seconds above."""

from __future__ import annotations

__all__ = ["duration", "share"]


def duration(seconds: float | None) -> str:
    """``"3.2 ms"``, ``"850 ms"``, ``"1.25 s"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    ms = seconds * 1000
    if abs(ms) < 10:
        return f"{ms:.1f} ms"
    if abs(seconds) < 1:
        return f"{ms:.0f} ms"
    return f"{seconds:,.2f} s"


def share(value: float | None) -> str:
    """A relative error or share as a signed percentage, ``"-"`` for None."""
    return "-" if value is None else f"{value:+.0%}"
