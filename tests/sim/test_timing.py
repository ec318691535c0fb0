"""The roofline's shape: what grows with what."""

from __future__ import annotations

import pytest

from sim import timing
from sim.profile import load_profile

PROFILES = ["gpu-a100", "gpu-a100-40g", "cpu-kunpeng920-q4", "cpu-kunpeng920-q8", "tiny"]


@pytest.mark.parametrize("name", PROFILES)
def test_prefill_time_grows_with_prompt_tokens(name: str) -> None:
    p = load_profile(name)
    times = [timing.prefill_time(p, n) for n in (64, 256, 1024, 4096)]
    assert times == sorted(times)
    assert len(set(times)) == len(times)


@pytest.mark.parametrize("name", PROFILES)
def test_decode_step_time_grows_with_batch(name: str) -> None:
    p = load_profile(name)
    times = [timing.decode_step_time(p, [1024] * b) for b in (1, 8, 32, 64)]
    assert times == sorted(times)
    assert times[0] < times[-1]


@pytest.mark.parametrize("name", PROFILES)
def test_decode_step_time_grows_with_context(name: str) -> None:
    p = load_profile(name)
    times = [timing.decode_step_time(p, [c] * 8) for c in (128, 1024, 4096, 8000)]
    assert times == sorted(times)
    assert times[0] < times[-1]


@pytest.mark.parametrize("name", PROFILES)
def test_batching_raises_aggregate_decode_throughput(name: str) -> None:
    p = load_profile(name)
    one = 1 / timing.decode_step_time(p, [1024])
    eight = 8 / timing.decode_step_time(p, [1024] * 8)
    assert eight > 2 * one


def test_gpu_prefill_is_far_faster_than_cpu_prefill() -> None:
    gpu = timing.prefill_time(load_profile("gpu-a100"), 2048)
    cpu = timing.prefill_time(load_profile("cpu-kunpeng920-q4"), 2048)
    assert cpu > 50 * gpu


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("batch,context", [(1, 10), (7, 900), (40, 3000)])
def test_decode_run_time_is_the_sum_of_its_steps(name: str, batch: int, context: int) -> None:
    p = load_profile(name)
    steps = 50
    one_by_one = sum(timing.decode_step_time(p, [context + j] * batch) for j in range(steps))
    assert timing.decode_run_time(p, batch, context * batch, steps) == pytest.approx(one_by_one, rel=1e-9)


def test_transfer_time_is_kv_bytes_over_the_link() -> None:
    p = load_profile("gpu-a100")
    assert timing.transfer_time(p, 2048) == pytest.approx(2048 * 262144 / 25e9)
    assert timing.transfer_time(p, 4096) == pytest.approx(2 * timing.transfer_time(p, 2048))


def test_empty_step_takes_no_time() -> None:
    assert timing.step_time(load_profile("tiny"), []) == 0.0
