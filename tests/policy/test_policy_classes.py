"""adaptive with service classes: work that can wait leaves the GPU, the GPU's batch is guarded by its tightest target."""

from __future__ import annotations

from dataclasses import replace

from syshaxd.policy import adaptive
from syshaxd.routing import Limits, RequestFeatures, ServiceLevel, limits_for
from tests.policy.helpers import engine, snap

BATCH = ServiceLevel("batch", ttft=60.0, tpot=1.0, priority=1)
SHORT = RequestFeatures(prompt_tokens=100, max_tokens=100)


def _decide(request: RequestFeatures, *engines):  # type: ignore[no-untyped-def]
    return adaptive(snap(*engines), request, limits_for(Limits(), request))


def test_work_that_can_wait_goes_to_the_cpu_that_meets_its_targets_and_chat_keeps_the_gpu() -> None:
    gpu = engine("gpu0", "gpu", running=4, tpot=0.03, tpot_batch=4)
    cpu = engine("cpu0", "cpu", running=1, tpot=0.3, tpot_batch=1, prefill_tps=400.0)
    chat = _decide(SHORT, gpu, cpu)
    batch = _decide(replace(SHORT, level=BATCH), gpu, cpu)
    assert chat.device == "gpu", chat.reason  # the CPU misses chat's 200 ms per token
    assert (batch.device, batch.engine) == ("cpu", "cpu0"), batch.reason
    assert "class 'batch' meets its targets off the gpu" in batch.reason


def test_work_that_can_wait_stays_on_the_gpu_when_the_cpu_would_miss_its_own_targets() -> None:
    gpu = engine("gpu0", "gpu", running=4, tpot=0.03, tpot_batch=4)
    slow = engine("cpu0", "cpu", running=1, tpot=2.5, tpot_batch=1, prefill_tps=400.0)  # 2.5 s per token
    assert _decide(replace(SHORT, level=BATCH), gpu, slow).device == "gpu"


def test_a_loose_request_is_held_when_the_gpu_batch_holds_a_tighter_one() -> None:
    # The batch decodes at 150 ms per token with prompts to prefill: one more breaks the 200 ms
    # the running chat requests are due, whatever the newcomer's own (1 s) target.
    gpu = engine("gpu0", "gpu", running=20, tpot=0.15, tpot_batch=20, decode_tokens=20 * 200, prompt_tokens=6000)
    loose = replace(SHORT, prompt_tokens=1000, level=ServiceLevel("batch", ttft=60.0, tpot=1.0))  # priority 0: GPU
    chatting = replace(gpu, tightest_tpot=0.2)
    alone = replace(gpu, tightest_tpot=1.0)
    assert _decide(loose, chatting).device is None
    assert _decide(loose, alone).device == "gpu"


def test_the_cpu_takes_no_more_when_one_more_would_make_a_running_answer_late() -> None:
    gpu = engine("gpu0", "gpu", running=30, tpot=0.19, tpot_batch=30)  # full for chat
    cpu = replace(engine("cpu0", "cpu", running=3, tpot=0.12, tpot_batch=3, prefill_tps=400.0), tightest_tpot=0.13)
    d = _decide(replace(SHORT, level=BATCH), gpu, cpu)
    assert d.device != "cpu", d.reason
    roomy = replace(cpu, tightest_tpot=1.0)
    assert _decide(replace(SHORT, level=BATCH), gpu, roomy).device == "cpu"
