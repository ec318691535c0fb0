"""The classic (sysHAX) rules, branch by branch, each threshold below, at and above."""

from __future__ import annotations

from dataclasses import replace

import pytest

from syshaxd.policy import classic, cpu_token_limit, pick_engine
from syshaxd.routing import Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineState
from tests.policy.helpers import engine, snap

REQ = RequestFeatures(prompt_tokens=100, max_tokens=200)
CPU_IDLE = engine("cpu0", "cpu", tps=10.0)


@pytest.mark.parametrize(
    ("running", "scheduled", "device"),
    [(7, 0, "gpu"), (8, 0, "cpu"), (9, 0, "cpu"), (5, 2, "gpu"), (5, 3, "cpu"), (0, 8, "cpu")],
)
def test_gpu_batch_limit_counts_running_plus_scheduled(running: int, scheduled: int, device: str) -> None:
    limits = Limits(gpu_max_batch_size=8)
    d = classic(snap(engine("gpu0", "gpu", running=running, scheduled=scheduled), CPU_IDLE), REQ, limits)
    assert d.device == device
    if device == "cpu":
        assert "batch limit 8" in d.reason
        assert d.engine == "cpu0"
    else:
        assert d.engine == "gpu0" and d.mode is Mode.WHOLE and d.token_limit is None


@pytest.mark.parametrize(("running", "device"), [(15, "gpu"), (16, "cpu"), (17, "cpu")])
def test_without_gpu_batch_size_the_limit_is_max_num_seqs(running: int, device: str) -> None:
    d = classic(snap(engine("gpu0", "gpu", running=running), CPU_IDLE), REQ, Limits(max_num_seqs=16))
    assert d.device == device


@pytest.mark.parametrize(
    ("running", "waiting", "batch_size", "device"),
    [
        (1, 1, None, "cpu"),  # running and waiting, no explicit limit: full
        (1, 0, None, "gpu"),
        (0, 1, None, "gpu"),  # waiting alone: the engine is still admitting
        (3, 2, 8, "gpu"),  # an explicit limit replaces the running-and-waiting rule
    ],
)
def test_running_and_waiting_rule_applies_only_without_a_gpu_batch_size(
    running: int, waiting: int, batch_size: int | None, device: str
) -> None:
    limits = Limits(gpu_max_batch_size=batch_size, max_num_seqs=64)
    d = classic(snap(engine("gpu0", "gpu", running=running, waiting=waiting), CPU_IDLE), REQ, limits)
    assert d.device == device
    if device == "cpu":
        assert "1 running and 1 waiting" in d.reason


@pytest.mark.parametrize(("kv", "device"), [(0.899, "gpu"), (0.90, "gpu"), (0.901, "cpu"), (None, "gpu")])
def test_gpu_cache_threshold_is_a_percentage_passed_strictly(kv: float | None, device: str) -> None:
    d = classic(snap(engine("gpu0", "gpu", kv=kv), CPU_IDLE), REQ, Limits(gpu_cache_threshold=90.0))
    assert d.device == device
    if device == "cpu":
        assert "KV cache 90.1% > 90%" in d.reason


GPU_FULL = engine("gpu0", "gpu", running=16)


@pytest.mark.parametrize(
    ("tps", "running", "device"),
    [
        (1.99, 1, None),  # slow and busy: no capacity
        (2.0, 1, "cpu"),
        (2.01, 1, "cpu"),
        (1.0, 0, "cpu"),  # slow but idle: the low rate just means nothing runs
        (None, 3, "cpu"),  # unknown throughput: the rule cannot apply
    ],
)
def test_cpu_throughput_threshold_while_busy(tps: float | None, running: int, device: str | None) -> None:
    cpu = engine("cpu0", "cpu", running=running, tps=tps)
    d = classic(snap(GPU_FULL, cpu), REQ, Limits(cpu_throughput_threshold=2.0))
    assert d.device == device
    if device is None:
        assert d.reason.startswith("no capacity")
        assert "cpu decode 1.99 tok/s < 2 while busy (1)" in d.reason


@pytest.mark.parametrize(
    ("running", "scheduled", "device"), [(19, 0, "cpu"), (20, 0, None), (21, 0, None), (17, 3, None), (17, 2, "cpu")]
)
def test_cpu_batch_limit_counts_running_plus_scheduled(running: int, scheduled: int, device: str | None) -> None:
    cpu = engine("cpu0", "cpu", running=running, scheduled=scheduled, tps=50.0)
    d = classic(snap(GPU_FULL, cpu), REQ, Limits(cpu_max_batch_size=20))
    assert d.device == device
    if device is None:
        assert "cpu batch limit 20" in d.reason and "gpu full" in d.reason


def test_cpu_max_batch_size_zero_never_uses_the_cpu() -> None:
    d = classic(snap(GPU_FULL, CPU_IDLE), REQ, Limits(cpu_max_batch_size=0))
    assert d.device is None


def test_cpu_decision_carries_the_token_limit() -> None:
    d = classic(snap(GPU_FULL, engine("cpu0", "cpu", running=1, tps=12.0)), REQ, Limits())
    assert (d.device, d.mode, d.token_limit) == ("cpu", Mode.WHOLE, 120)
    assert "token limit 120" in d.reason


@pytest.mark.parametrize(
    ("tps", "expected"),
    [
        (None, 10),
        (0.0, 10),
        (-3.0, 10),
        (2.5, 20),  # 25 -> 20: a half goes to the even ten
        (3.5, 40),  # 35 -> 40
        (4.4, 40),
        (4.6, 50),
        (0.9, 10),  # 9 -> 10
        (0.4, 10),  # 4 -> 0 -> clamped up to the minimum
        (49.9, 500),
        (99.4, 990),
        (99.6, 1000),
        (100.4, 1000),  # 1004 -> 1000, at the maximum
        (150.0, 1000),  # clamped down
        (float("inf"), 1000),
    ],
)
def test_token_limit_formula_rounds_to_tens_and_clamps(tps: float | None, expected: int) -> None:
    limits = Limits(token_limit_multiplier=10.0, token_limit_min=10, token_limit_max=1000)
    assert cpu_token_limit(tps, limits) == expected


@pytest.mark.parametrize(("tps", "expected"), [(1.0, 50), (4.9, 50), (5.6, 60), (200.0, 1000)])
def test_token_limit_default_clamps(tps: float, expected: int) -> None:
    assert cpu_token_limit(tps, Limits()) == expected


def test_token_limit_multiplier_scales() -> None:
    assert cpu_token_limit(8.0, Limits(token_limit_multiplier=2.5)) == 50  # 20 -> min 50
    assert cpu_token_limit(40.0, Limits(token_limit_multiplier=2.5)) == 100


def test_auto_pd_offload_turns_a_cpu_decision_into_a_split() -> None:
    d = classic(snap(GPU_FULL, CPU_IDLE), REQ, Limits(auto_pd_offload=True))
    assert (d.device, d.mode, d.engine) == ("cpu", Mode.PD_SPLIT, "cpu0")
    assert d.token_limit == 100


def test_auto_pd_offload_without_a_usable_gpu_stays_whole_on_the_cpu() -> None:
    gpu = engine("gpu0", "gpu", state=EngineState.DOWN)
    d = classic(snap(gpu, CPU_IDLE), REQ, Limits(auto_pd_offload=True))
    assert (d.device, d.mode) == ("cpu", Mode.WHOLE)
    assert "no usable GPU engine" in d.reason


def test_auto_pd_offload_does_not_touch_gpu_decisions() -> None:
    d = classic(snap(engine("gpu0", "gpu"), CPU_IDLE), REQ, Limits(auto_pd_offload=True))
    assert (d.device, d.mode) == ("gpu", Mode.WHOLE)


def test_num_decode_tokens_goes_to_the_cpu_even_with_an_idle_gpu() -> None:
    req = replace(REQ, has_num_decode_tokens=True, generated_tokens=100)
    d = classic(snap(engine("gpu0", "gpu"), CPU_IDLE), req, Limits(auto_pd_offload=True))
    assert (d.device, d.mode, d.token_limit) == ("cpu", Mode.WHOLE, 100)
    assert "num_decode_tokens" in d.reason


def test_num_decode_tokens_waits_when_the_cpu_is_full() -> None:
    req = replace(REQ, has_num_decode_tokens=True)
    d = classic(snap(engine("gpu0", "gpu"), engine("cpu0", "cpu", running=20, tps=30.0)), req, Limits())
    assert d.device is None


def test_no_usable_cpu_means_no_capacity() -> None:
    cpu = engine("cpu0", "cpu", draining=True)
    d = classic(snap(GPU_FULL, cpu), REQ, Limits())
    assert d.device is None and "no usable CPU engine" in d.reason


def test_nothing_usable_means_no_capacity() -> None:
    d = classic(snap(), REQ, Limits())
    assert d.device is None


@pytest.mark.parametrize(("gpu_tps", "device"), [(100.0, "cpu"), (120.0, "gpu"), (300.0, "gpu")])
def test_later_syshax_prefers_the_faster_per_request_decoder_when_both_have_room(
    gpu_tps: float, device: str
) -> None:
    gpu = engine("gpu0", "gpu", running=10, tps=gpu_tps)  # 10, 12, 30 tok/s per request
    cpu = engine("cpu0", "cpu", running=1, tps=12.0)
    d = classic(snap(gpu, cpu), REQ, Limits(max_num_seqs=64))
    assert d.device == device
    if device == "cpu":
        assert "cpu decodes faster per request (12.0 > 10.0 tok/s)" in d.reason


def test_idle_gpu_is_not_compared_by_throughput() -> None:
    gpu = engine("gpu0", "gpu", running=0, tps=0.0)
    cpu = engine("cpu0", "cpu", running=1, tps=12.0)
    assert classic(snap(gpu, cpu), REQ, Limits()).device == "gpu"


def test_forced_pd_split() -> None:
    req = replace(REQ, forced_mode=Mode.PD_SPLIT)
    d = classic(snap(engine("gpu0", "gpu"), CPU_IDLE), req, Limits())
    assert (d.device, d.mode) == ("cpu", Mode.PD_SPLIT)
    d = classic(snap(engine("gpu0", "gpu", state=EngineState.DOWN), CPU_IDLE), req, Limits())
    assert d.device is None and "no usable GPU" in d.reason


def test_pick_engine_takes_the_least_loaded_usable_engine() -> None:
    engines = snap(
        engine("gpu0", "gpu", running=5),
        engine("gpu1", "gpu", running=2, scheduled=2),
        engine("gpu2", "gpu", running=0, draining=True),
        engine("gpu3", "gpu", running=0, state=EngineState.DOWN),
        engine("gpu4", "gpu", running=0, enabled=False),
        engine("cpu0", "cpu"),
    )
    chosen = pick_engine(engines, "gpu")
    assert chosen is not None and chosen.name == "gpu1"
    assert pick_engine(snap(engine("gpu0", "gpu")), "cpu") is None


def test_classic_checks_the_least_loaded_gpu() -> None:
    gpus = (engine("gpu0", "gpu", running=8), engine("gpu1", "gpu", running=3))
    d = classic(snap(*gpus, CPU_IDLE), REQ, Limits(gpu_max_batch_size=8))
    assert (d.device, d.engine) == ("gpu", "gpu1")
