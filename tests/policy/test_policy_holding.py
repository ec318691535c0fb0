"""adaptive's GPU admission: it holds a request back when the running batch or the KV cache would suffer."""

from __future__ import annotations

from dataclasses import replace

from syshaxd.policy import adaptive
from syshaxd.policy.estimates import GPU_DEFAULTS, device_model
from syshaxd.policy.holding import gpu_hold, projected_tpot
from syshaxd.policy.queueing import queue_order
from syshaxd.routing import Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineView
from tests.policy.helpers import engine, snap, with_capacity

PROMPT = RequestFeatures(prompt_tokens=1000, max_tokens=200)


def test_a_request_that_would_break_the_running_batchs_tpot_target_waits() -> None:
    # 20 decoding at 150 ms per token with 6000 prompt tokens routed but not started: one
    # more 1000-token prompt pushes the batch past 80% of the 200 ms target.
    gpu = engine("gpu0", "gpu", running=20, tpot=0.15, tpot_batch=20, decode_tokens=20 * 200, prompt_tokens=6000)
    model = device_model(gpu, GPU_DEFAULTS)
    assert projected_tpot(gpu, model, 1000) > 0.2 * 0.8
    d = adaptive(snap(gpu), PROMPT, Limits())
    assert (d.device, d.mode) == (None, Mode.WHOLE)
    assert d.reason.startswith("hold: running batch would decode at")
    # The same batch with a looser TPOT target takes it.
    assert adaptive(snap(gpu), PROMPT, Limits(tpot_target=0.5)).device == "gpu"


def test_a_request_about_to_miss_its_ttft_target_is_held_only_past_the_tpot_target_itself() -> None:
    # 20 decoding at 160 ms, 6,000 prompt tokens on their way: one more 1,000-token prompt
    # projects 174 ms, past the guard (80% of 200 ms) but within the target.
    gpu = engine("gpu0", "gpu", running=20, tpot=0.16, tpot_batch=20, decode_tokens=20 * 200, prompt_tokens=6000)
    assert 0.16 < projected_tpot(gpu, device_model(gpu, GPU_DEFAULTS), 1000) < 0.2
    fresh = adaptive(snap(gpu), PROMPT, Limits())
    assert fresh.device is None and fresh.reason.startswith("hold: running batch would decode at 174ms")
    # After 2 s its first token (1.3 s away on the GPU) still comes with a fifth of the 5 s target to spare.
    assert adaptive(snap(gpu), replace(PROMPT, waited=2.0), Limits()).device is None
    # After 3 s holding it would make it late: the GPU takes it while the batch keeps the target.
    assert adaptive(snap(gpu), replace(PROMPT, waited=3.0), Limits()).device == "gpu"
    # A batch the request would push past the target itself holds it however long it waited.
    slower = replace(gpu, metrics=replace(gpu.metrics, tpot_recent=0.19))
    late_soon = adaptive(snap(slower), replace(PROMPT, waited=4.5), Limits())
    assert late_soon.device is None and late_soon.reason.startswith("hold: running batch would decode at")


def test_a_batch_far_from_its_tpot_target_admits() -> None:
    gpu = engine("gpu0", "gpu", running=20, tpot=0.04, tpot_batch=20, decode_tokens=20 * 200)
    d = adaptive(snap(gpu), PROMPT, Limits())
    assert d.device == "gpu", d.reason


def test_the_prefill_interference_term_is_what_holds() -> None:
    # Same batch, same measured TPOT: only the prompts waiting to be prefilled differ.
    calm = engine("gpu0", "gpu", running=20, tpot=0.12, tpot_batch=20, decode_tokens=20 * 200)
    busy = replace(calm, scheduled_prompt_tokens=30_000)  # 5 s of prefill over ~100 tokens each still writes
    assert adaptive(snap(calm), PROMPT, Limits()).device == "gpu"
    assert adaptive(snap(busy), PROMPT, Limits()).device is None


def test_an_engine_that_queues_inside_takes_no_more() -> None:
    gpu = engine("gpu0", "gpu", running=10, waiting=2, tpot=0.04, tpot_batch=10)
    d = adaptive(snap(gpu), PROMPT, Limits())
    assert d.device is None and d.reason.startswith("hold: gpu engine already queues 2")


def test_kv_headroom_holds_and_the_cpu_takes_what_meets_its_targets_there() -> None:
    gpu = with_capacity(engine("gpu0", "gpu", running=10, kv=0.85, tpot=0.04, tpot_batch=10), 20_000)
    # 17,000 tokens in the cache + 3,000 of this prompt > 98% of 20,000
    big = RequestFeatures(prompt_tokens=3000, max_tokens=200)
    d = adaptive(snap(gpu), big, Limits())
    assert d.device is None and "gpu KV cache would need 20000 of 20000 tokens" in d.reason
    small = RequestFeatures(prompt_tokens=50, max_tokens=50)
    held = adaptive(snap(gpu, engine("cpu0", "cpu")), replace(small, prompt_tokens=3000), Limits(handoff="recompute"))
    assert held.device is None  # a 3000-token prompt meets no target on the CPU
    # 93% used: a 50-token prompt still fits the known capacity; with the capacity unknown,
    # classic's 90% threshold stands in and the CPU, which meets the targets, takes it.
    unsure = engine("gpu0", "gpu", running=10, kv=0.93, tpot=0.04, tpot_batch=10)
    assert adaptive(snap(with_capacity(unsure, 20_000), engine("cpu0", "cpu")), small, Limits()).device == "gpu"
    moved = adaptive(snap(unsure, engine("cpu0", "cpu")), small, Limits())
    assert (moved.device, moved.mode) == ("cpu", Mode.WHOLE)
    assert "gpu held back: gpu KV cache 93.0% >= 90%" in moved.reason


def test_a_prompt_the_cache_has_room_for_is_admitted_close_to_the_guard() -> None:
    # 17,000 tokens in the cache + 2,400 of this prompt = 97% of 20,000: the engine has room,
    # and holding it would only make it wait (on a KV-starved card, into lateness).
    gpu = with_capacity(engine("gpu0", "gpu", running=10, kv=0.85, tpot=0.04, tpot_batch=10), 20_000)
    model = device_model(gpu, GPU_DEFAULTS)
    assert gpu_hold(gpu, model, 2400, Limits()) is None
    assert adaptive(snap(gpu), RequestFeatures(prompt_tokens=2400, max_tokens=200), Limits()).device == "gpu"
    over = gpu_hold(gpu, model, 2700, Limits())  # 98.5%: past the guard
    assert over is not None and "gpu KV cache would need 19700 of 20000 tokens" in over


#: Ten answers running at 40 ms per token; the first to end has written 100 of its 500 tokens.
RUNNING = ((4.0, 500),) + ((1.0, 3000),) * 9


def _outgrowing_gpu() -> EngineView:
    """15,000 of 20,000 tokens in the cache; until the first answer ends, the batch and a
    newcomer write 11 x 400 = 4,400 tokens more."""
    gpu = with_capacity(engine("gpu0", "gpu", running=10, kv=0.75, tpot=0.04, tpot_batch=10), 20_000)
    return replace(gpu, answers=RUNNING)


def test_a_long_prompt_waits_while_the_batch_would_outgrow_the_cache_before_an_answer_ends() -> None:
    gpu = _outgrowing_gpu()
    model = device_model(gpu, GPU_DEFAULTS)
    # 4,000 prompt tokens fit under the 98% guard, but not with the growth: vLLM would
    # preempt the newest request, this one, and recompute its 0.67 s prefill each time.
    held = gpu_hold(gpu, model, 4000, Limits())
    assert held is not None and "would outgrow the gpu KV cache (19000 + 4400 of 20000 tokens)" in held
    d = adaptive(snap(gpu), RequestFeatures(prompt_tokens=4000, max_tokens=200), Limits())
    assert d.device is None and "before an answer ends" in d.reason
    # A short prompt's recompute is a stall the batch absorbs: it is admitted, first token in time.
    assert gpu_hold(replace(gpu, metrics=replace(gpu.metrics, kv_cache_usage=0.85)), model, 300, Limits()) is None
    # The same long prompt is admitted once the first answer is about to end...
    ending = replace(gpu, answers=((19.6, 500),) + RUNNING[1:])
    assert gpu_hold(ending, model, 4000, Limits()) is None
    # ... and, for a pd_split's prefill (it leaves the GPU after its first token), at once.
    assert gpu_hold(gpu, model, 4000, Limits(), decode=False) is None


def test_which_prompts_wait_for_room_does_not_follow_the_tpot_target() -> None:
    # The state above, at a 100 ms TPOT target: a 1,000-token prompt (0.17 s of prefill)
    # goes in as it does at 200 ms; tied to the target, it waited minutes for room.
    gpu = _outgrowing_gpu()
    model = device_model(gpu, GPU_DEFAULTS)
    tight = Limits(ttft_target=2.0, tpot_target=0.1)
    assert gpu_hold(gpu, model, 1000, tight) is None
    held = gpu_hold(gpu, model, 4000, tight)
    assert held is not None and "before an answer ends" in held


def test_an_idle_gpu_always_admits_even_a_huge_prompt() -> None:
    gpu = with_capacity(engine("gpu0", "gpu"), 1000)
    model = device_model(gpu, GPU_DEFAULTS)
    assert gpu_hold(gpu, model, 5000, Limits()) is None
    assert adaptive(snap(gpu), RequestFeatures(prompt_tokens=5000, max_tokens=10), Limits()).device == "gpu"


def test_a_late_request_goes_to_a_cpu_with_room_or_waits_while_the_gpu_has_no_slack() -> None:
    gpu = engine("gpu0", "gpu", running=20, tpot=0.12, tpot_batch=20, decode_tokens=20 * 200)
    late = replace(PROMPT, waited=6.0)
    on_time = adaptive(snap(gpu), PROMPT, Limits())
    assert on_time.device == "gpu"  # within 80% of the target: admitted
    held = adaptive(snap(gpu), late, Limits())
    assert held.device is None and held.reason.startswith("hold: waited 6.0s, past the TTFT target")
    to_cpu = adaptive(snap(gpu, engine("cpu0", "cpu")), late, Limits())
    assert to_cpu.device == "cpu" and "past the TTFT target" in to_cpu.reason
    quiet = engine("gpu0", "gpu", running=2, tpot=0.03, tpot_batch=2, decode_tokens=400)
    assert adaptive(snap(quiet), late, Limits()).device == "gpu"  # slack: served at once


def test_a_late_request_leaves_a_busy_cpu_to_requests_still_on_time() -> None:
    gpu = engine("gpu0", "gpu", running=20, tpot=0.12, tpot_batch=20, decode_tokens=20 * 200)
    late = replace(PROMPT, waited=6.0)
    # Eight decoding at 130 ms per token: with one more, above half the 200 ms target.
    busy_cpu = engine("cpu0", "cpu", running=8, tpot=0.13, tpot_batch=8, decode_tokens=8 * 200)
    held = adaptive(snap(gpu, busy_cpu), late, Limits())
    assert held.device is None and held.reason.startswith("hold: waited 6.0s")
    # An answer the idle CPU would decode for longer than its budget is not sent either.
    long = replace(late, max_tokens=5000)
    assert adaptive(snap(gpu, engine("cpu0", "cpu")), long, Limits()).device is None


def test_a_measured_cpu_prefill_speed_replaces_the_default_a_gpus_only_raises_it() -> None:
    from syshaxd.policy.estimates import CPU_DEFAULTS

    def measured(view: EngineView, speed: float) -> EngineView:
        return replace(view, metrics=replace(view.metrics, prefill_speed=speed))

    cpu = engine("cpu0", "cpu")
    assert device_model(measured(cpu, 240.0), CPU_DEFAULTS).prefill_tps == 240.0
    assert device_model(measured(cpu, 12.0), CPU_DEFAULTS).prefill_tps == 12.0
    assert device_model(cpu, CPU_DEFAULTS).prefill_tps == CPU_DEFAULTS.prefill_tps
    gpu = engine("gpu0", "gpu")
    assert device_model(measured(gpu, 1500.0), GPU_DEFAULTS).prefill_tps == GPU_DEFAULTS.prefill_tps
    assert device_model(measured(gpu, 9000.0), GPU_DEFAULTS).prefill_tps == 9000.0
    # A GPU that queues inside: a 1,000-token prompt waits for it at the default CPU speed
    # (33 s), and goes to a CPU that has measured 240 tokens/s (~4.2 s with its first token).
    full = engine("gpu0", "gpu", running=10, waiting=2, tpot=0.04, tpot_batch=10)
    assert adaptive(snap(full, cpu), PROMPT, Limits()).device is None
    moved = adaptive(snap(full, measured(cpu, 240.0)), PROMPT, Limits())
    assert (moved.device, moved.mode) == ("cpu", Mode.WHOLE), moved.reason


def test_adaptive_orders_its_line_by_deadline_and_the_others_first_come_first_served() -> None:
    assert (queue_order("adaptive"), queue_order("classic"), queue_order("gpu-only")) == ("deadline", "fifo", "fifo")
