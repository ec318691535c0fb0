"""Whether repeats fit the same constants: judged on what they predict at the measured points."""

from __future__ import annotations

from dataclasses import replace

from sim.calibrate.fit import Constants, DecodePoint, PrefillPoint
from sim.calibrate.stability import judge

BASE = Constants(prefill_per_token=20e-6, attention=0.0, decode_floor=2e-3, kv_per_token=1e-8, step_overhead=1e-3,
                 per_seq_overhead=800e-6)
PREFILL = [PrefillPoint(64, 0.005), PrefillPoint(512, 0.012)]
DECODE = [DecodePoint(1, 16, 0.004), DecodePoint(8, 16, 0.01)]


def test_fits_that_predict_alike_are_stable_even_when_they_split_a_step_differently() -> None:
    # The same 8-sequence step, the fixed part and the per-sequence part shared differently.
    other = replace(BASE, decode_floor=2.2e-3, per_seq_overhead=775e-6)
    got = judge([BASE, other], PREFILL, DECODE)
    assert got.stable and got.spread < 0.1


def test_per_sequence_costs_of_776_and_1253_us_are_not_stable_and_the_sentence_says_where() -> None:
    got = judge([replace(BASE, per_seq_overhead=776e-6), replace(BASE, per_seq_overhead=1253e-6)], PREFILL, DECODE)
    assert not got.stable and got.spread > 0.2
    assert got.worst == "the step of 8 at context 16"
    assert "NOT stable" in got.sentence() and "the step of 8 at context 16" in got.sentence()
    assert got.ranges()["decode step, per sequence"] == (776e-6, 1253e-6)


def test_one_fit_cannot_be_judged() -> None:
    got = judge([BASE], PREFILL, DECODE)
    assert not got.stable and "only one repeat" in got.sentence()
