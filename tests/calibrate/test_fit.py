"""The fit, on step times the simulator's own model computes: what goes in comes out."""

from __future__ import annotations

import random

import pytest

from sim import timing
from sim.calibrate.fit import DecodePoint, FitError, PrefillPoint, constants_of, fit
from sim.calibrate.nnls import nnls
from sim.profile import load_profile


def _points(name: str, api: float = 0.0, noise: float = 0.0) -> tuple[list[PrefillPoint], list[DecodePoint]]:
    p = load_profile(name)
    rng = random.Random(7)

    def jitter() -> float:
        return 1 + rng.gauss(0.0, noise)

    top = min(p.max_num_batched_tokens, p.max_model_len)
    prefill = [PrefillPoint(n, timing.prefill_time(p, n) * jitter() + api)
               for n in sorted({max(8, top * k // 16) for k in (1, 2, 4, 8, 12, 16)})]
    decode = [DecodePoint(b, c, timing.decode_step_time(p, [c] * b) * jitter())
              for b, c in ((1, 48), (2, 48), (4, 48), (8, 48), (1, top * 3 // 4))]
    return prefill, decode


def test_nnls_solves_a_plain_line_and_keeps_constants_non_negative() -> None:
    rows = [[1.0, float(x)] for x in range(6)]
    assert nnls(rows, [2 + 3 * x for x in range(6)]) == pytest.approx([2.0, 3.0])
    assert nnls(rows, [5 - x for x in range(6)])[1] == 0.0  # a falling line: slope held at zero


def test_exact_points_give_back_the_tiny_profile_constants() -> None:
    prefill, decode = _points("tiny")
    got = fit(prefill, decode).constants
    want = constants_of(load_profile("tiny"))
    assert got.prefill_per_token == pytest.approx(want.prefill_per_token, rel=0.01)
    assert got.decode_base == pytest.approx(want.decode_base, rel=0.01)
    assert got.per_seq_overhead + got.kv_per_token == pytest.approx(want.per_seq_overhead + want.kv_per_token, rel=0.05)


def test_short_prompts_under_the_memory_floor_are_left_out_of_the_prefill_fit() -> None:
    prefill, decode = _points("tiny")  # 32 tokens: 6.4 ms of compute under a 10 ms weight read
    result = fit(prefill, decode)
    assert [p.prompt_tokens for p in result.prefill_left_out] == [32]


def test_api_overhead_is_kept_apart_from_the_prefill_slope() -> None:
    prefill, decode = _points("tiny", api=0.003, noise=0.005)
    got = fit(prefill, decode).constants
    want = constants_of(load_profile("tiny"))
    assert got.prefill_per_token == pytest.approx(want.prefill_per_token, rel=0.05)
    assert got.step_overhead + got.api_overhead == pytest.approx(want.step_overhead + 0.003, rel=0.3)


def test_a_compute_bound_decode_batch_is_left_out_and_the_rest_recovered() -> None:
    prefill, decode = _points("cpu-kunpeng920-q4", noise=0.01)  # 4 x 34 ms of compute > 98 ms of reads
    result = fit(prefill, decode)
    want = constants_of(load_profile("cpu-kunpeng920-q4"))
    assert [p.batch for p in result.decode_left_out] == [4, 8]
    assert result.constants.prefill_per_token == pytest.approx(want.prefill_per_token, rel=0.1)
    assert result.constants.decode_base == pytest.approx(want.decode_base, rel=0.1)


def test_too_few_measurements_are_refused_with_a_reason() -> None:
    with pytest.raises(FitError, match="at least 2 prefill"):
        fit([PrefillPoint(64, 0.01)], [DecodePoint(1, 16, 0.01), DecodePoint(2, 16, 0.011)])
