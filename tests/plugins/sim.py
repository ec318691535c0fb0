"""Fixtures that run real simulated engines (``python -m sim``) on free loopback ports.

- ``sim_engine(profile="tiny", dialect=..., speed=20.0, faults={...}, ...)`` starts one
  engine and returns its :class:`EngineHandle` (``.url``, ``.set_faults()``, ``.stats()``);
  ``sim_engine.process(handle)`` gives the process (``.alive()``, ``.log()``).
- ``sim_pair(gpu_profile="tiny", cpu_profile="tiny", speed=20.0, ...)`` starts a GPU + CPU
  pair in one process (shared handoff store) and returns ``(gpu, cpu)``.
Every process started through a fixture is stopped at teardown, even on failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from sim.launch import EngineHandle, SimProcess, start_engine, start_pair

DEFAULT_SPEED = 20.0


class _Factory:
    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._procs: dict[str, SimProcess] = {}

    def process(self, engine: EngineHandle) -> SimProcess:
        """The process an engine runs in."""
        return self._procs[engine.url]


class SimEngineFactory(_Factory):
    """Starts single simulated engines."""

    def __call__(self, profile: str = "tiny", **kwargs: Any) -> EngineHandle:
        kwargs.setdefault("speed", DEFAULT_SPEED)
        proc, engine = self._stack.enter_context(start_engine(profile, **kwargs))
        self._procs[engine.url] = proc
        return engine


class SimPairFactory(_Factory):
    """Starts GPU + CPU pairs."""

    def __call__(self, gpu_profile: str = "tiny", cpu_profile: str = "tiny", **kwargs: Any) -> tuple[EngineHandle, EngineHandle]:
        kwargs.setdefault("speed", DEFAULT_SPEED)
        proc, gpu, cpu = self._stack.enter_context(start_pair(gpu_profile=gpu_profile, cpu_profile=cpu_profile, **kwargs))
        self._procs[gpu.url] = proc
        self._procs[cpu.url] = proc
        return gpu, cpu


@pytest.fixture
def sim_engine() -> Iterator[SimEngineFactory]:
    """Factory for simulated engines (stopped at teardown)."""
    with contextlib.ExitStack() as stack:
        yield SimEngineFactory(stack)


@pytest.fixture
def sim_pair() -> Iterator[SimPairFactory]:
    """Factory for simulated GPU + CPU pairs (stopped at teardown)."""
    with contextlib.ExitStack() as stack:
        yield SimPairFactory(stack)
