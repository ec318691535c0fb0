"""advise's self-check and ranking, as pure functions: when it refuses, what it calls a tie, how it ranks."""

from __future__ import annotations

from dataclasses import replace

from sim.advise.check import (
    MAX_ERROR,
    Bounds,
    EngineRole,
    judged,
    over_bound,
    profile_problems,
    window_problem,
)
from sim.advise.choose import choose
from sim.advise.options import Setting
from sim.advise.predict import Prediction
from sim.advise.window import Measured
from sim.profile import load_profile

CLASSIC = Setting("classic", None, 20, False)
ADAPTIVE = Setting("adaptive", None, 20, False)
ACTUAL = Measured(requests=120, completed=120, span=40.0, goodput=3.0, throughput=3.0, output_tps=90.0,
                  ttft_p50=0.200, ttft_p99=0.800, tpot_p99=0.090, cpu_share=0.3, tpot_p50=0.080)


def test_a_window_too_thin_or_too_short_is_named_with_its_figures() -> None:
    one = replace(ACTUAL, requests=1, completed=1, span=0.0)
    assert "1 recorded requests are too few" in (window_problem(one, Bounds()) or "")
    short = replace(ACTUAL, span=4.0)
    assert "4.0 s is too short" in (window_problem(short, Bounds()) or "")
    assert window_problem(ACTUAL, Bounds()) is None
    assert window_problem(short, Bounds(min_seconds=3.0)) is None


def test_the_bound_judges_every_checked_figure_worst_first_and_a_few_ms_of_latency_count_as_met() -> None:
    off = replace(ACTUAL, ttft_p50=0.024, output_tps=160.0, tpot_p50=0.083)
    assert over_bound(off, ACTUAL, MAX_ERROR) == ["TTFT p50 -88%", "output tokens/s +78%"]
    # 3 ms against 1 ms is +200% but within the floor: the daemon's own hop is that large.
    fast = replace(ACTUAL, tpot_p50=0.001, tpot_p99=0.002)
    assert judged(replace(fast, tpot_p50=0.003), fast)["tpot_p50"] == 0.0
    assert over_bound(ACTUAL, ACTUAL, MAX_ERROR) == []


def test_a_profile_of_another_model_device_or_simulator_is_named() -> None:
    tiny = load_profile("tiny")  # model tiny-sim, a gpu profile
    llama = [EngineRole("gpu0", "gpu", "http://a", "gpu-role", None),
             EngineRole("cpu0", "cpu", "http://b", "tiny-sim", None)]
    problems = profile_problems(llama, {"gpu0": ("tiny", tiny), "cpu0": ("tiny", tiny)})
    assert problems == ["profile tiny is of model tiny-sim but engine gpu0 serves gpu-role",
                        "profile tiny is a gpu profile but engine cpu0 plays the cpu role"]
    sims = [EngineRole("gpu0", "gpu", "http://a", "x", "tiny"), EngineRole("cpu0", "cpu", "http://b", "x", "tiny")]
    assert profile_problems(sims, {"gpu0": ("tiny", tiny), "cpu0": ("tiny", tiny)}) == []
    assert profile_problems(sims, {"gpu0": ("gpu-a100", tiny), "cpu0": ("tiny", tiny)}) == [
        "engine gpu0 simulates profile tiny, not gpu-a100"]


def _p(setting: Setting, goodput: float, ttft_p99: float, completed: int = 120) -> Prediction:
    return Prediction(setting, replace(ACTUAL, goodput=goodput, throughput=goodput * 120 / completed,
                                       completed=completed, ttft_p99=ttft_p99), {})


def test_options_apart_by_less_than_the_error_are_ties_and_latency_separates_when_all_meet_the_targets() -> None:
    # Same goodput, every request within the targets: TTFT p99 90-fold apart decides.
    preds = [_p(Setting("gpu-only"), 3.0, 4.5), _p(CLASSIC, 3.0, 0.05), _p(ADAPTIVE, 3.0, 0.052)]
    choice = choose(preds, Setting("gpu-only"), span=40.0, error={"goodput": 0.1, "ttft_p99": 0.2})
    assert choice.cpu_helps and choice.index == 1 and choice.tied == (2,)
    assert "TTFT p99 50 ms against its 4.50 s" in choice.summary
    # 300 ms against 50 ms with a 600% TTFT p99 error cannot be told apart: GPU-only ties, so it is recommended.
    preds[0] = _p(Setting("gpu-only"), 3.0, 0.3)
    blind = choose(preds, Setting("gpu-only"), span=40.0, error={"ttft_p99": 6.0, "goodput": 0.1})
    assert blind.index == 0 and not blind.cpu_helps and blind.tied == (1, 2)


def test_goodput_ties_follow_the_error_and_latency_does_not_rank_options_that_miss_targets() -> None:
    preds = [_p(Setting("gpu-only"), 2.0, 5.0, completed=100), _p(CLASSIC, 2.5, 0.1, completed=110),
             _p(ADAPTIVE, 2.7, 3.0, completed=110)]
    # Noise alone (5%, 2 requests over 40 s): adaptive is ahead of classic.
    assert choose(preds, CLASSIC, span=40.0).index == 2
    # A 20% goodput error makes them ties; the current setting wins a tie.
    wide = choose(preds, CLASSIC, span=40.0, error={"goodput": 0.2}, basis="within 20% on 120 requests")
    assert wide.index == 1 and wide.tied == (2,) and wide.summary.endswith("(within 20% on 120 requests).")


def test_a_p99_of_too_few_requests_is_one_requests_fate_and_is_not_judged() -> None:
    few = replace(ACTUAL, requests=50, completed=50)
    slow_tail = replace(few, ttft_p99=4.89)
    assert "ttft_p99" not in judged(slow_tail, few)
    assert over_bound(slow_tail, few, MAX_ERROR) == []
    assert over_bound(replace(slow_tail, requests=120, completed=120), ACTUAL, MAX_ERROR) == ["TTFT p99 +511%"]
