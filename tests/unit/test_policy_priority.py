"""``gpu-priority``: the GPU alone, holding while it is saturated so the line orders by priority."""

from __future__ import annotations

from syshaxd.policy import get_policy
from syshaxd.routing import Limits, Mode, RequestFeatures, ServiceLevel
from tests.unit.policy_helpers import engine, snap

BATCH = RequestFeatures(prompt_tokens=10, max_tokens=10, level=ServiceLevel("batch", ttft=60, tpot=1, priority=1))


def test_gpu_priority_places_on_the_gpu_while_it_has_room_and_never_on_the_cpu() -> None:
    d = get_policy("gpu-priority")(snap(engine("gpu0", "gpu", running=3), engine("cpu0", "cpu")), BATCH, Limits())
    assert (d.device, d.mode, d.engine) == ("gpu", Mode.WHOLE, "gpu0")


def test_gpu_priority_holds_at_the_batch_limit_even_with_an_idle_cpu() -> None:
    full = snap(engine("gpu0", "gpu", running=16), engine("cpu0", "cpu"))
    d = get_policy("gpu-priority")(full, BATCH, Limits(max_num_seqs=16))
    assert d.device is None and "batch limit 16" in d.reason and "'batch'" in d.reason


def test_gpu_priority_holds_while_the_engine_queues() -> None:
    d = get_policy("gpu-priority")(snap(engine("gpu0", "gpu", running=4, waiting=2)), BATCH, Limits())
    assert d.device is None and "waiting" in d.reason
