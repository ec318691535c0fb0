"""Baseline policies and the policy registry."""

from __future__ import annotations

from typing import get_args

import pytest

from syshaxd.config import PolicyName
from syshaxd.policy import POLICY_NAMES, RoundRobin, get_policy
from syshaxd.routing import Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineState
from tests.policy.helpers import engine, snap

REQ = RequestFeatures(prompt_tokens=10, max_tokens=10)
BOTH = snap(engine("gpu0", "gpu", running=500, waiting=500), engine("cpu0", "cpu", running=99))


def test_every_config_policy_name_has_a_policy() -> None:
    assert set(get_args(PolicyName)) == set(POLICY_NAMES)
    for name in POLICY_NAMES:
        assert callable(get_policy(name))


def test_gpu_only_ignores_load() -> None:
    d = get_policy("gpu-only")(BOTH, REQ, Limits())
    assert (d.device, d.mode, d.engine) == ("gpu", Mode.WHOLE, "gpu0")


def test_cpu_only_ignores_load() -> None:
    d = get_policy("cpu-only")(BOTH, REQ, Limits(cpu_max_batch_size=1))
    assert (d.device, d.engine) == ("cpu", "cpu0")


@pytest.mark.parametrize("name", ["gpu-only", "cpu-only"])
def test_single_device_baselines_wait_without_their_device(name: str) -> None:
    d = get_policy(name)(snap(), REQ, Limits())
    assert d.device is None and "no usable" in d.reason


def test_round_robin_alternates_per_instance() -> None:
    rr = get_policy("round-robin")
    assert isinstance(rr.__wrapped__, RoundRobin)  # type: ignore[attr-defined]
    assert [rr(BOTH, REQ, Limits()).device for _ in range(5)] == ["gpu", "cpu", "gpu", "cpu", "gpu"]
    other = get_policy("round-robin")
    assert other is not rr and other(BOTH, REQ, Limits()).device == "gpu"


def test_round_robin_skips_a_device_without_usable_engines() -> None:
    rr = RoundRobin()
    only_gpu = snap(engine("gpu0", "gpu"), engine("cpu0", "cpu", state=EngineState.DOWN))
    decisions = [rr(only_gpu, REQ, Limits()) for _ in range(3)]
    assert [d.device for d in decisions] == ["gpu", "gpu", "gpu"]
    assert "cpu has no usable engine" in decisions[1].reason
    assert rr(snap(), REQ, Limits()).device is None
