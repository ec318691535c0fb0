"""``gpu-priority``: the GPU alone, holding while it is saturated so the line orders by priority."""

from __future__ import annotations

from dataclasses import replace

from syshaxd.policy import get_policy
from syshaxd.routing import Limits, Mode, RequestFeatures, ServiceLevel
from tests.policy.helpers import engine, snap, with_capacity

BATCH = RequestFeatures(prompt_tokens=10, max_tokens=10, level=ServiceLevel("batch", ttft=60, tpot=1, priority=1))


def test_gpu_priority_places_on_the_gpu_while_it_has_room_and_never_on_the_cpu() -> None:
    d = get_policy("gpu-priority")(snap(engine("gpu0", "gpu", running=3), engine("cpu0", "cpu")), BATCH, Limits())
    assert (d.device, d.mode, d.engine) == ("gpu", Mode.WHOLE, "gpu0")


def test_gpu_priority_sets_no_batch_limit_of_its_own() -> None:
    d = get_policy("gpu-priority")(snap(engine("gpu0", "gpu", running=40)), BATCH, Limits(max_num_seqs=16))
    assert d.device == "gpu"


def test_gpu_priority_holds_when_the_kv_cache_would_pass_the_threshold_even_with_an_idle_cpu() -> None:
    gpu = with_capacity(engine("gpu0", "gpu", running=8, kv=0.85), 100_000)
    policy, limits = get_policy("gpu-priority"), Limits(gpu_cache_threshold=90.0)
    d = policy(snap(gpu, engine("cpu0", "cpu")), replace(BATCH, prompt_tokens=8000), limits)
    assert d.device is None and "KV cache" in d.reason and "'batch'" in d.reason
    assert policy(snap(gpu, engine("cpu0", "cpu")), replace(BATCH, prompt_tokens=1000), limits).device == "gpu"


def test_gpu_priority_holds_while_the_engine_queues() -> None:
    d = get_policy("gpu-priority")(snap(engine("gpu0", "gpu", running=4, waiting=2)), BATCH, Limits())
    assert d.device is None and "waiting" in d.reason
