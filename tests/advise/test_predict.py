"""A replay on sped-up engines runs the monitor on the engines' clock: its windows scale too."""

from __future__ import annotations

import pytest

from sim.advise.predict import Daemon, _options
from sim.profile import load_profile
from sim.runner import EngineSpec, RunOptions, VirtualConductor
from syshaxd.engines.rates import LATENCY_WINDOW, RATE_WINDOW
from syshaxd.routing import Limits


@pytest.mark.parametrize("speed", [0.125, 1.0, 4.0])
def test_the_replays_rate_and_latency_windows_are_the_daemons_on_the_engines_clock(speed: float) -> None:
    options = _options(Daemon(scrape_interval=0.5), speed, Limits())
    assert options.scrape_interval == pytest.approx(0.5 * speed)
    assert options.rate_window == pytest.approx(RATE_WINDOW * speed)
    assert options.latency_window == pytest.approx(LATENCY_WINDOW * speed)
    tiny = load_profile("tiny")
    conductor = VirtualConductor([EngineSpec("gpu0", "gpu", tiny), EngineSpec("cpu0", "cpu", tiny)],
                                 "adaptive", Limits(), options)
    for engine in conductor.engines.values():
        assert engine.rates.window == pytest.approx(RATE_WINDOW * speed)
        assert engine.rates.latency_window == pytest.approx(LATENCY_WINDOW * speed)


def test_a_run_without_options_keeps_the_monitors_defaults() -> None:
    assert RunOptions().latency_window == LATENCY_WINDOW == 30.0
