"""The adaptive policy: where it differs from classic, why, and that its reasons are true."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syshaxd.policy import adaptive, classic, get_policy
from syshaxd.policy.adaptive import decide, estimate_options, secs
from syshaxd.policy.estimates import CPU_DEFAULTS, GPU_DEFAULTS, Tuning
from syshaxd.routing import Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineState, EngineView
from tests.policy.helpers import engine, snap

SHORT = RequestFeatures(prompt_tokens=50, max_tokens=100)
LONG_PROMPT = RequestFeatures(prompt_tokens=2000, max_tokens=100)
CPU_IDLE = engine("cpu0", "cpu")
GPU = GPU_DEFAULTS
CPU = CPU_DEFAULTS


def test_idle_gpu_estimates_from_the_defaults_and_says_so() -> None:
    d = adaptive(snap(engine("gpu0", "gpu"), CPU_IDLE), SHORT, Limits())
    assert (d.device, d.mode, d.engine, d.token_limit) == ("gpu", Mode.WHOLE, "gpu0", None)
    ttft = 50 / GPU.prefill_tps + GPU.tpot1
    assert d.est_ttft == pytest.approx(ttft)
    assert d.est_e2e == pytest.approx(ttft + 99 * GPU.tpot1)
    assert d.reason.startswith(f"gpu: est ttft {secs(ttft)} tpot 29ms e2e {secs(d.est_e2e)}")
    # The alternative's numbers are in the reason too: CPU whole for a 50-token prompt.
    cpu_ttft = 50 / CPU.prefill_tps + CPU.tpot1
    assert f"cpu would be ttft {secs(cpu_ttft)} tpot 100ms" in d.reason


def test_long_prompt_on_a_gpu_at_its_limit_classic_prefills_on_cpu_adaptive_splits() -> None:
    gpu = engine("gpu0", "gpu", running=8)
    limits = Limits(gpu_max_batch_size=8, handoff="kv-transfer")
    c = classic(snap(gpu, CPU_IDLE), LONG_PROMPT, limits)
    assert (c.device, c.mode) == ("cpu", Mode.WHOLE)  # 2000 prompt tokens at ~30 tok/s: a minute
    d = adaptive(snap(gpu, CPU_IDLE), LONG_PROMPT, limits)
    assert (d.device, d.mode) == ("cpu", Mode.PD_SPLIT)
    ttft = 2000 / GPU.prefill_tps + 0.05 + CPU.tpot1  # GPU prefill, KV handoff, first CPU token
    assert d.est_ttft == pytest.approx(ttft)
    assert d.reason.startswith(f"pd_split: est ttft {secs(ttft)}")
    assert "gpu at batch limit 8" in d.reason


def test_long_prompt_past_the_gpu_limit_stays_on_gpu_rather_than_prefill_on_cpu() -> None:
    gpu = engine("gpu0", "gpu", running=8)
    limits = Limits(gpu_max_batch_size=8, handoff="recompute")  # a split would re-prefill on the CPU
    d = adaptive(snap(gpu, CPU_IDLE), LONG_PROMPT, limits)
    assert (d.device, d.mode) == ("gpu", Mode.WHOLE)
    assert "gpu at batch limit 8, nothing better" in d.reason
    assert d.reason.endswith("cpu not an option: prompt of 2000 tokens is too long to prefill on the cpu")


def test_past_the_gpu_limit_a_short_request_moves_even_though_the_gpu_would_meet_targets() -> None:
    gpu = engine("gpu0", "gpu", running=4)
    limits = Limits(gpu_max_batch_size=4)
    opts = estimate_options(snap(gpu, CPU_IDLE), SHORT, limits)
    assert opts.estimates["gpu"].meets(limits)
    d = adaptive(snap(gpu, CPU_IDLE), SHORT, limits)
    assert (d.device, d.mode) == ("cpu", Mode.WHOLE)
    assert d.reason.endswith("; gpu at batch limit 4")
    assert adaptive(snap(engine("gpu0", "gpu", running=3), CPU_IDLE), SHORT, limits).device == "gpu"


def test_long_prompt_when_gpu_is_at_max_num_seqs_but_not_queueing_stays_on_gpu() -> None:
    gpu = engine("gpu0", "gpu", running=16, kv=0.5)
    c = classic(snap(gpu, CPU_IDLE), LONG_PROMPT, Limits(max_num_seqs=16))
    assert c.device == "cpu"
    d = adaptive(snap(gpu, CPU_IDLE), LONG_PROMPT, Limits(max_num_seqs=16))
    assert d.device == "gpu"
    assert d.reason.endswith("cpu not an option: prompt of 2000 tokens is too long to prefill on the cpu")


DEEP_QUEUE_GPU = engine("gpu0", "gpu", running=40, waiting=30, scheduled=5, kv=0.7)


def test_short_request_with_a_deep_gpu_queue_goes_to_the_cpu_where_classic_keeps_the_gpu() -> None:
    limits = Limits(gpu_max_batch_size=64)  # classic: 45 of 64, so the GPU "has room"
    assert classic(snap(DEEP_QUEUE_GPU, CPU_IDLE), SHORT, limits).device == "gpu"
    d = adaptive(snap(DEEP_QUEUE_GPU, CPU_IDLE), SHORT, limits)
    assert (d.device, d.mode, d.engine) == ("cpu", Mode.WHOLE, "cpu0")
    cpu_ttft = 50 / CPU.prefill_tps + CPU.tpot1
    assert d.est_ttft == pytest.approx(cpu_ttft)
    assert d.reason.startswith(f"cpu: est ttft {secs(cpu_ttft)} tpot 100ms")
    gpu_est = estimate_options(snap(DEEP_QUEUE_GPU, CPU_IDLE), SHORT, limits).estimates["gpu"]
    assert gpu_est.ttft > limits.ttft_target  # the GPU would miss it anyway
    assert d.reason.endswith("gpu held back: gpu engine already queues 30")


def test_deep_gpu_queue_estimate_follows_the_conductors_token_counts() -> None:
    base = estimate_options(snap(DEEP_QUEUE_GPU, CPU_IDLE), SHORT, Limits()).estimates["gpu"]
    short_left = replace(DEEP_QUEUE_GPU, inflight_decode_tokens=45 * 10, scheduled_prompt_tokens=1000)
    quick = estimate_options(snap(short_left, CPU_IDLE), SHORT, Limits()).estimates["gpu"]
    assert quick.ttft < base.ttft  # running requests nearly done: the queue drains fast
    # The engine queues: adaptive holds the request at the conductor (or uses the CPU).
    no_cpu = adaptive(snap(short_left), SHORT, Limits())
    assert no_cpu.device is None and no_cpu.reason.startswith("hold: gpu engine already queues 30")


def test_a_cpu_decode_past_its_budget_is_never_offered() -> None:
    req = RequestFeatures(prompt_tokens=50, max_tokens=8000)  # 8000 x 0.1 s: past the 450 s budget
    d = adaptive(snap(DEEP_QUEUE_GPU, CPU_IDLE), req, Limits())
    assert d.device is None  # the GPU queues; the CPU would take 13 minutes: wait
    assert "cpu decode of 8000 tokens would take" in d.reason


def test_cpu_tpot_target_protects_the_cpu_batch() -> None:
    # 4 decoding at 0.18 s/token: a fifth would push every one of them past 0.2 s.
    busy_cpu = engine("cpu0", "cpu", running=4, tpot=0.18)
    opts = estimate_options(snap(DEEP_QUEUE_GPU, busy_cpu), SHORT, Limits())
    assert opts.estimates["cpu"].tpot > 0.2
    assert adaptive(snap(DEEP_QUEUE_GPU, busy_cpu), SHORT, Limits()).device is None  # waits
    # A looser target lets the same request onto the CPU.
    assert adaptive(snap(DEEP_QUEUE_GPU, busy_cpu), SHORT, Limits(tpot_target=0.3)).device == "cpu"


def test_live_rates_replace_the_defaults() -> None:
    slow_gpu = engine("gpu0", "gpu", running=1, tpot=0.06)
    d = adaptive(snap(slow_gpu, CPU_IDLE), SHORT, Limits())
    tpot = 0.06 * GPU.shape(2)  # measured at batch 1, the request makes it 2
    assert d.est_e2e == pytest.approx(50 / GPU.prefill_tps + tpot + 99 * tpot)
    fast_cpu = engine("cpu0", "cpu", running=2, tps=40.0)  # 20 tok/s each at batch 2
    cpu = estimate_options(snap(slow_gpu, fast_cpu), SHORT, Limits()).estimates["cpu"]
    assert cpu.tpot == pytest.approx(0.05 / CPU.shape(2) * CPU.shape(3))


def _gpu_with_ttft(seconds: float) -> EngineView:
    """A GPU whose estimated TTFT for SHORT is ``seconds``: prompts queued ahead of it."""
    queued = (seconds - 50 / GPU.prefill_tps - GPU.tpot1 * GPU.shape(3)) * GPU.prefill_tps
    return engine("gpu0", "gpu", running=1, scheduled=1, prompt_tokens=int(queued))


def test_margin_keeps_the_gpu_when_the_alternative_is_only_slightly_better() -> None:
    cpu = engine("cpu0", "cpu", running=4)  # TPOT 0.1 x 5/3 = 167 ms: cost 0.83
    limits = Limits()
    gpu = _gpu_with_ttft(5.1)  # misses the 5 s target by a little: cost 1.02
    opts = estimate_options(snap(gpu, cpu), SHORT, limits)
    g, c = opts.estimates["gpu"].cost(limits), opts.estimates["cpu"].cost(limits)
    assert c < 1 < g < c / 0.8  # the CPU meets the targets, but is better by less than 20%
    assert decide(snap(gpu, cpu), SHORT, limits).device == "gpu"
    assert decide(snap(gpu, cpu), SHORT, limits, Tuning(margin=0.0)).device == "cpu"
    d = decide(snap(_gpu_with_ttft(6.0), cpu), SHORT, limits)
    assert d.device == "cpu" and "gpu would be ttft 6.0s" in d.reason


def test_healthy_gpu_keeps_everything_even_when_cpu_would_meet_targets() -> None:
    gpu = engine("gpu0", "gpu", running=20, tps=20 / 0.035)
    for req in (SHORT, LONG_PROMPT, RequestFeatures(prompt_tokens=10, max_tokens=10)):
        assert adaptive(snap(gpu, CPU_IDLE), req, Limits()).device == "gpu"


def test_without_a_usable_gpu_the_cpu_serves_even_long_prompts() -> None:
    gpu = engine("gpu0", "gpu", state=EngineState.DOWN)
    d = adaptive(snap(gpu, CPU_IDLE), LONG_PROMPT, Limits())
    assert (d.device, d.mode) == ("cpu", Mode.WHOLE)
    assert d.reason.startswith("cpu: no usable GPU engine")
    assert d.est_ttft is not None and d.est_ttft > 60  # 2000 tokens at ~30 tok/s, and it says so


def test_without_a_usable_gpu_and_a_full_cpu_there_is_no_capacity() -> None:
    gpu = engine("gpu0", "gpu", enabled=False)
    d = adaptive(snap(gpu, engine("cpu0", "cpu", running=20)), SHORT, Limits())
    assert d.device is None and "cpu at batch limit 20" in d.reason


def test_a_continuation_stays_on_the_cpu() -> None:
    req = replace(SHORT, has_num_decode_tokens=True, generated_tokens=50)
    d = adaptive(snap(engine("gpu0", "gpu"), CPU_IDLE), req, Limits())
    assert (d.device, d.mode, d.token_limit) == ("cpu", Mode.WHOLE, None)


def test_forced_split() -> None:
    req = replace(SHORT, forced_mode=Mode.PD_SPLIT)
    d = adaptive(snap(engine("gpu0", "gpu"), CPU_IDLE), req, Limits(handoff="syshax"))
    assert (d.device, d.mode) == ("cpu", Mode.PD_SPLIT)
    assert d.est_ttft == pytest.approx(50 / GPU.prefill_tps + GPU.tpot1)  # GPU makes the first token
    d = adaptive(snap(engine("gpu0", "gpu"), engine("cpu0", "cpu", running=20)), req, Limits())
    assert d.device is None and d.reason.startswith("no capacity: pd_split requested")


def test_recompute_split_counts_the_cpu_prefill() -> None:
    gpu = engine("gpu0", "gpu", running=8)
    req = RequestFeatures(prompt_tokens=200, max_tokens=101)
    split = estimate_options(snap(gpu, CPU_IDLE), req, Limits(handoff="recompute")).estimates["pd_split"]
    kv = estimate_options(snap(gpu, CPU_IDLE), req, Limits(handoff="kv-transfer")).estimates["pd_split"]
    assert split.e2e - kv.e2e > 201 / CPU.prefill_tps - 0.2
    assert split.tpot == pytest.approx((100 * CPU.tpot1 + 201 / CPU.prefill_tps) / 100)


def test_auto_pd_offload_means_the_cpu_never_prefills() -> None:
    opts = estimate_options(snap(DEEP_QUEUE_GPU, CPU_IDLE), SHORT, Limits(auto_pd_offload=True))
    assert "cpu" not in opts.estimates and "auto_pd_offload" in opts.unavailable["cpu"]


def test_get_policy_names() -> None:
    assert get_policy("adaptive").__wrapped__ is adaptive  # type: ignore[attr-defined]
    assert get_policy("classic").__wrapped__ is classic  # type: ignore[attr-defined]
    with pytest.raises(KeyError, match="round-robin"):
        get_policy("fastest")


_ENGINE = st.builds(
    lambda device, running, waiting, scheduled, kv, tps, state, tpot: engine(
        f"{device}{running}{waiting}", device, running=running, waiting=waiting, scheduled=scheduled, kv=kv,
        tps=tps, state=state, tpot=tpot,
    ),
    st.sampled_from(["gpu", "cpu"]),
    st.integers(0, 300),
    st.integers(0, 300),
    st.integers(0, 50),
    st.one_of(st.none(), st.floats(0, 1)),
    st.one_of(st.none(), st.floats(0, 1e5)),
    st.sampled_from(list(EngineState)),
    st.one_of(st.none(), st.floats(1e-4, 10)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_ENGINE, max_size=4, unique_by=lambda e: e.name),
    st.integers(0, 50_000),
    st.integers(1, 20_000),
    st.sampled_from(["syshax", "kv-transfer", "llamacpp-slots", "recompute"]),
    st.one_of(st.none(), st.integers(1, 64)),
)
def test_adaptive_holds_back_from_a_usable_gpu_only_with_a_reason_and_never_from_an_idle_one(
    engines: list, prompt: int, max_tokens: int, handoff: str, cap: int | None  # type: ignore[type-arg]
) -> None:
    s = snap(*engines)
    limits = Limits(handoff=handoff, gpu_max_batch_size=cap)  # type: ignore[arg-type]
    d = adaptive(s, RequestFeatures(prompt_tokens=prompt, max_tokens=max_tokens), limits)
    gpu = min(s.usable("gpu"), key=lambda e: (e.running + e.scheduled + e.waiting, e.metrics.kv_cache_usage or 0.0,
                                              e.name), default=None)
    if gpu is not None and d.device is None:
        assert d.reason.startswith("hold: ")
        assert gpu.running + gpu.scheduled > 0  # an idle GPU always takes the request
    if d.device is not None and d.est_ttft is not None:
        assert d.est_e2e is not None and math.isfinite(d.est_e2e) and d.est_e2e >= d.est_ttft >= 0
    if d.device == "cpu" and d.mode is Mode.WHOLE and s.usable("gpu"):
        # a long prompt prefills on the CPU only as fast as the CPU showed it can, or when late
        cpu = min(s.usable("cpu"), key=lambda e: (e.running + e.scheduled + e.waiting, e.metrics.kv_cache_usage or 0.0,
                                                  e.name))
        fastest = max(CPU.prefill_tps, cpu.metrics.prefill_tps or 0.0)
        assert prompt <= max(256, fastest * limits.ttft_target / 2) or "past the TTFT target" in d.reason


@pytest.mark.parametrize(("batch", "relative"), [(1, 1.0), (2, 1.02), (3, 1.04), (4, 4 / 3), (6, 2.0)])
def test_cpu_tpot_is_flat_until_compute_binds_then_grows_with_the_batch(batch: int, relative: float) -> None:
    assert CPU.shape(batch) == pytest.approx(relative)


def test_gpu_tpot_follows_the_measured_fit() -> None:
    # calibration: ~29 ms at B=1, ~35 ms + 0.33 ms x B for B = 10..45 (45 -> ~50 ms)
    assert GPU.tpot1 * GPU.shape(45) == pytest.approx(0.050, abs=0.003)


def test_a_burst_not_yet_in_the_cpu_measurement_is_not_taken_for_speed() -> None:
    # 0.11 s/token measured, 8 running now: unless the engine says the 0.11 s was measured
    # with 8 decoding, assume the burst came after the measurement.
    unsure = engine("cpu0", "cpu", running=8, tpot=0.11)
    known = engine("cpu0", "cpu", running=8, tpot=0.11, tpot_batch=8.0)
    est_unsure = estimate_options(snap(DEEP_QUEUE_GPU, unsure), SHORT, Limits()).estimates["cpu"]
    est_known = estimate_options(snap(DEEP_QUEUE_GPU, known), SHORT, Limits()).estimates["cpu"]
    assert est_unsure.tpot == pytest.approx(0.11 / CPU.shape(3) * CPU.shape(9))
    assert est_known.tpot == pytest.approx(0.11 / CPU.shape(8) * CPU.shape(9))
    assert adaptive(snap(DEEP_QUEUE_GPU, unsure), SHORT, Limits()).device is None  # the GPU queues: wait
    assert adaptive(snap(DEEP_QUEUE_GPU, known), SHORT, Limits()).device == "cpu"
