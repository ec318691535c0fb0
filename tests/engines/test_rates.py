"""Rates from counter deltas: windows, resets, gauges that win, latency means."""

from __future__ import annotations

import math

import pytest

from syshaxd.engines import RateTracker, get_dialect
from syshaxd.snapshot import EngineMetrics, HistogramData


def rec(prompt: float | None = None, gen: float | None = None, **kw: object) -> EngineMetrics:
    return EngineMetrics(prompt_tokens_total=prompt, generation_tokens_total=gen, **kw)  # type: ignore[arg-type]


def test_first_record_has_no_rate_yet() -> None:
    out = RateTracker().update(rec(100, 1000), now=10.0)
    assert out.prefill_tps is None and out.decode_tps is None


def test_rates_are_counter_deltas_over_time() -> None:
    t = RateTracker(window=10.0)
    t.update(rec(100, 1000), now=10.0)
    out = t.update(rec(400, 1060), now=12.0)
    assert out.prefill_tps == pytest.approx(150.0)
    assert out.decode_tps == pytest.approx(30.0)


def test_rate_averages_over_the_window() -> None:
    t = RateTracker(window=3.0)
    t.update(rec(0, 0), now=0.0)
    t.update(rec(0, 100), now=1.0)
    t.update(rec(0, 100), now=2.0)
    out = t.update(rec(0, 130), now=3.0)
    assert out.decode_tps == pytest.approx(130 / 3)
    # Once the first point leaves the window the rate covers the later points only.
    out = t.update(rec(0, 160), now=5.0)
    assert out.decode_tps == pytest.approx((160 - 100) / (5 - 2))


def test_counter_reset_counts_the_new_value_as_the_increase() -> None:
    t = RateTracker(window=2.0)
    t.update(rec(0, 5000), now=0.0)
    out = t.update(rec(0, 40), now=2.0)  # the engine restarted and has made 40 tokens since
    assert out.decode_tps == pytest.approx(20.0)
    out = t.update(rec(0, 100), now=4.0)
    assert out.decode_tps == pytest.approx(30.0)


def test_a_gauge_from_the_engine_wins_over_counter_deltas() -> None:
    t = RateTracker()
    t.update(rec(0, 0, decode_tps=86.5), now=0.0)
    out = t.update(rec(10, 10, decode_tps=86.5), now=1.0)
    assert out.decode_tps == 86.5
    assert out.prefill_tps == pytest.approx(10.0)


def test_a_clock_that_does_not_advance_gives_no_rate() -> None:
    t = RateTracker()
    t.update(rec(0, 0), now=5.0)
    out = t.update(rec(0, 100), now=5.0)
    assert out.decode_tps is None


def test_missing_counter_gives_no_rate_for_it() -> None:
    t = RateTracker()
    t.update(rec(None, 0), now=0.0)
    out = t.update(rec(None, 50), now=1.0)
    assert out.prefill_tps is None
    assert out.decode_tps == pytest.approx(50.0)


def test_a_counter_missing_from_some_scrapes_is_differenced_from_the_points_that_hold_it() -> None:
    t = RateTracker(window=2.0)
    t.update(rec(None, 0), now=0.0)
    assert t.update(rec(100, 10), now=1.0).prefill_tps is None  # first seen: nothing to difference
    # No point 2 s old holds it yet: the oldest that does (t=1).
    assert t.update(rec(300, 20), now=2.0).prefill_tps == pytest.approx(200.0)
    t.update(rec(None, 30), now=3.0)
    # The newest point at least 2 s old is t=3, which lacks it: the newest before that holding it (t=2).
    out = t.update(rec(1000, 40), now=5.5)
    assert out.prefill_tps == pytest.approx((1000 - 300) / 3.5)
    assert out.decode_tps == pytest.approx((40 - 30) / 2.5)


def hist(count: float, total: float) -> HistogramData:
    return HistogramData(((math.inf, count),), count, total)


def test_recent_tpot_and_ttft_are_means_of_histogram_deltas_and_stay_when_idle() -> None:
    t = RateTracker(window=10.0)
    t.update(rec(histograms=(("tpot", hist(100, 5.0)), ("ttft", hist(10, 2.0)))), now=0.0)
    out = t.update(rec(histograms=(("tpot", hist(300, 15.0)), ("ttft", hist(12, 3.0)))), now=1.0)
    assert out.tpot_recent == pytest.approx(10.0 / 200)
    assert out.ttft_recent == pytest.approx(1.0 / 2)
    later = t.update(rec(histograms=(("tpot", hist(300, 15.0)), ("ttft", hist(12, 3.0)))), now=20.0)
    assert later.tpot_recent == pytest.approx(0.05)  # nothing new: the last measurement stays


def test_finish_rate_from_request_counter() -> None:
    t = RateTracker()
    t.update(rec(requests_finished_total=10.0), now=0.0)
    out = t.update(rec(requests_finished_total=16.0), now=2.0)
    assert out.finish_rate == pytest.approx(3.0)


def test_llamacpp_rates_come_from_counters_not_the_resetting_gauges() -> None:
    parse = get_dialect("llamacpp").parse
    before = "llamacpp:tokens_predicted_total 1000\nllamacpp:tokens_predicted_seconds_total 10\n" \
             "llamacpp:prompt_tokens_total 50\nllamacpp:predicted_tokens_seconds 999\n"
    after = "llamacpp:tokens_predicted_total 1080\nllamacpp:tokens_predicted_seconds_total 14\n" \
            "llamacpp:prompt_tokens_total 250\nllamacpp:predicted_tokens_seconds 0\n"
    t = RateTracker()
    t.update(parse(before), now=100.0)
    out = t.update(parse(after), now=102.0)
    assert out.decode_tps == pytest.approx(40.0)
    assert out.prefill_tps == pytest.approx(100.0)
    assert out.tpot_recent == pytest.approx(4.0 / 80)


def test_reset_forgets_history() -> None:
    t = RateTracker()
    t.update(rec(0, 0), now=0.0)
    t.reset()
    assert t.update(rec(0, 100), now=1.0).decode_tps is None


def test_latency_means_use_the_longer_latency_window() -> None:
    t = RateTracker(window=2.0, latency_window=10.0)
    t.update(rec(0, 0, histograms=(("tpot", hist(0, 0.0)),)), now=0.0)
    t.update(rec(0, 100, histograms=(("tpot", hist(100, 30.0)),)), now=4.0)  # one slow patch: 0.3 s/token
    out = t.update(rec(0, 200, histograms=(("tpot", hist(200, 40.0)),)), now=8.0)  # then 0.1 s/token
    assert out.decode_tps == pytest.approx(25.0)  # rates: the last 4 s only
    assert out.tpot_recent == pytest.approx(40.0 / 200)  # latency: all 8 s
    # 40 s of gaps between tokens in 8 s of time: five requests decoding at once on average.
    assert out.tpot_batch == pytest.approx(5.0)


def test_tokens_running_requests_decoded_so_far_count_before_the_counter_moves() -> None:
    # llama.cpp: tokens_predicted_total moves only when a request ends; /slots shows progress.
    t = RateTracker(window=2.0)
    t.update(rec(0, 1000, generation_tokens_running=0), now=0.0)
    out = t.update(rec(0, 1000, generation_tokens_running=40), now=2.0)
    assert out.decode_tps == pytest.approx(20.0)  # a long generation is visible while it runs
    # It ends: the counter takes its tokens and the slot is idle; the rate stays smooth.
    out = t.update(rec(0, 1060, generation_tokens_running=0), now=4.0)
    assert out.decode_tps == pytest.approx(10.0)


def test_a_request_ending_between_the_two_reads_is_not_a_restart() -> None:
    t = RateTracker(window=2.0)
    t.update(rec(0, 1000, generation_tokens_running=50), now=0.0)
    # Counted twice for one scrape (in the counter and still in /slots)...
    t.update(rec(0, 1050, generation_tokens_running=60), now=2.0)
    # ...then once: the sum falls back by 50, which is held, not taken for a reset.
    out = t.update(rec(0, 1050, generation_tokens_running=20), now=4.0)
    assert out.decode_tps == pytest.approx(0.0)
    out = t.update(rec(0, 1050, generation_tokens_running=80), now=6.0)
    assert out.decode_tps == pytest.approx(10.0)
    # A real restart (the counter itself drops) still restarts the count.
    out = t.update(rec(0, 30, generation_tokens_running=10), now=8.0)
    assert out.decode_tps == pytest.approx(20.0)


def test_prefill_speed_is_prompt_tokens_per_second_of_prefill_and_stays_when_idle() -> None:
    t = RateTracker(window=5.0, latency_window=30.0)
    t.update(rec(1000, 0, prefill_seconds_total=10.0), now=0.0)
    out = t.update(rec(3400, 0, prefill_seconds_total=20.0), now=12.0)
    # 2400 tokens in 10 s of prefilling: capacity, while the prompt rate (demand) is 200/s.
    assert out.prefill_speed == pytest.approx(240.0)
    assert out.prefill_tps == pytest.approx(200.0)
    idle = t.update(rec(3400, 0, prefill_seconds_total=20.0), now=60.0)
    assert idle.prefill_speed == pytest.approx(240.0)
    assert RateTracker().update(rec(5, 0), now=1.0).prefill_speed is None


def test_a_tiny_prefill_keeps_the_speed_measured_on_real_prompts() -> None:
    t = RateTracker(window=5.0, latency_window=30.0)
    t.update(rec(0, 0, prefill_seconds_total=0.0), now=0.0)
    assert t.update(rec(2, 0, prefill_seconds_total=0.04), now=1.0).prefill_speed is None  # 2 tokens: no measure
    out = t.update(rec(2402, 0, prefill_seconds_total=10.04), now=12.0)
    assert out.prefill_speed == pytest.approx(240.0, rel=0.01)
    # 40 s on, a window holding only a handoff's 8 tokens in 0.15 s (53/s) leaves 240 standing.
    later = t.update(rec(2410, 0, prefill_seconds_total=10.19), now=52.0)
    assert later.prefill_speed == pytest.approx(240.0, rel=0.01)
