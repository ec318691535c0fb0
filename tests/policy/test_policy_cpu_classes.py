"""A class with ``cpu: false`` is kept off the CPU by every policy, deciding as on a box without one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from syshaxd.config.classes import ServiceClass
from syshaxd.policy import POLICY_NAMES, adaptive, classic, get_policy
from syshaxd.routing import Limits, Mode, RequestFeatures, ServiceLevel, limits_for
from tests.policy.helpers import engine, snap

BATCH = ServiceLevel("batch", ttft=60.0, tpot=1.0, priority=1)
GPU_BOUND = replace(BATCH, cpu=False)
SHORT = RequestFeatures(prompt_tokens=100, max_tokens=100)


def _decide(name: str, request: RequestFeatures, *engines):  # type: ignore[no-untyped-def]
    return get_policy(name)(snap(*engines), request, limits_for(Limits(), request))


def test_adaptive_keeps_a_class_off_the_cpu_that_it_would_send_there() -> None:
    gpu = engine("gpu0", "gpu", running=4, tpot=0.03, tpot_batch=4)
    cpu = engine("cpu0", "cpu", running=1, tpot=0.3, tpot_batch=1, prefill_tps=400.0)
    allowed = _decide("adaptive", replace(SHORT, level=BATCH), gpu, cpu)
    kept = _decide("adaptive", replace(SHORT, level=GPU_BOUND), gpu, cpu)
    assert allowed.device == "cpu", allowed.reason
    assert (kept.device, kept.engine) == ("gpu", "gpu0"), kept.reason
    assert kept.reason.endswith("(class 'batch' is kept off the cpu)")


def test_classic_holds_a_class_kept_off_the_cpu_while_the_gpu_is_full_and_sends_the_others_there() -> None:
    full = engine("gpu0", "gpu", running=16)
    cpu = engine("cpu0", "cpu", running=1)
    assert _decide("classic", replace(SHORT, level=BATCH), full, cpu).device == "cpu"
    held = _decide("classic", replace(SHORT, level=GPU_BOUND), full, cpu)
    assert held.device is None and "no usable CPU engine" in held.reason and "kept off the cpu" in held.reason


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_no_policy_places_a_class_kept_off_the_cpu_there(name: str) -> None:
    gpu, cpu = engine("gpu0", "gpu", running=40, waiting=3, kv=0.97), engine("cpu0", "cpu")
    policy = get_policy(name)
    for _ in range(2):  # round-robin: both turns
        d = policy(snap(gpu, cpu), replace(SHORT, level=GPU_BOUND), Limits())
        assert d.device != "cpu" and d.mode is Mode.WHOLE, d.reason


def test_a_continuation_and_a_forced_split_are_what_the_client_asked_for_and_pass() -> None:
    gpu, cpu = engine("gpu0", "gpu", running=2), engine("cpu0", "cpu")
    going_on = replace(SHORT, level=GPU_BOUND, has_num_decode_tokens=True, generated_tokens=20)
    assert _decide("classic", going_on, gpu, cpu).device == "cpu"
    forced = replace(SHORT, level=GPU_BOUND, forced_mode=Mode.PD_SPLIT)
    assert _decide("adaptive", forced, gpu, cpu).mode is Mode.PD_SPLIT


def test_the_wrapped_policies_are_the_named_functions_and_the_class_table_carries_the_flag() -> None:
    assert get_policy("adaptive").__wrapped__ is adaptive  # type: ignore[attr-defined]
    assert get_policy("classic").__wrapped__ is classic  # type: ignore[attr-defined]
    assert ServiceClass().level("interactive").cpu is True
    assert ServiceClass.model_validate({"ttft_ms": 60000, "cpu": False}).level("batch").cpu is False
