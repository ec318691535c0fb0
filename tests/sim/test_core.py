"""The batching core: capacity, chunked prefill, KV exhaustion, preemption, handoff, fast-forward."""

from __future__ import annotations

import pytest

from sim.core import HOLD_TIMEOUT, EngineCore, Seq, SimRequest, State
from sim.profile import load_profile


def tiny() -> EngineCore:
    return EngineCore(load_profile("tiny"))


def drain(core: EngineCore, fast: bool = False, limit: int = 100_000) -> list[Seq]:
    done: list[Seq] = []
    for _ in range(limit):
        if not core.has_work():
            return done
        result = core.advance(float("inf")) if fast else core.step()
        if result is not None:
            done.extend(result.finished)
    raise AssertionError("engine did not drain")


def test_max_num_seqs_caps_the_batch_and_the_rest_wait() -> None:
    core = tiny()
    for i in range(12):
        core.submit(SimRequest(f"r{i}", context_tokens=10, max_new_tokens=50))
    core.step()
    assert core.num_running == core.max_num_seqs == 8
    assert core.num_waiting == 4
    finished = drain(core)
    assert len(finished) == 12
    assert all(s.generated == 50 for s in finished)


def test_long_prompt_is_prefilled_in_chunks_before_the_first_token() -> None:
    core = tiny()
    seq = core.submit(SimRequest("long", context_tokens=1500, max_new_tokens=3))
    steps_without_token = 0
    while seq.first_token is None:
        result = core.step()
        assert result is not None
        if not result.tokens:
            steps_without_token += 1
            assert result.prefill_tokens == core.profile.max_num_batched_tokens
    assert steps_without_token == 2  # 512 + 512 tokens, then 476 more and the first token
    assert core.counters.prompt_tokens == 1500


def test_kv_exhaustion_queues_first_then_preempts() -> None:
    core = tiny()  # 256 blocks of 16 tokens
    for i in range(5):
        core.submit(SimRequest(f"r{i}", context_tokens=1000, max_new_tokens=300))
    saw_kv_queueing = False
    while core.has_work():
        core.step()
        if core.num_waiting and core.num_running < core.max_num_seqs and core.counters.preemptions == 0:
            saw_kv_queueing = True  # seats free, blocks not
    assert saw_kv_queueing
    assert core.counters.preemptions > 0
    assert core.counters.finished == {"length": 5}
    assert core.free_blocks == core.total_blocks


def test_swap_mode_moves_preempted_requests_to_swap_and_back() -> None:
    profile = load_profile("tiny").variant(preemption_mode="swap", swap_bytes=100e6)
    core = EngineCore(profile)
    for i in range(5):
        core.submit(SimRequest(f"r{i}", context_tokens=1000, max_new_tokens=300))
    saw_swapped = False
    while core.has_work():
        core.step()
        saw_swapped = saw_swapped or core.num_swapped > 0
        assert core.swap_usage <= 1.0
    assert saw_swapped
    assert core.counters.preemptions > 0
    assert core.free_swap == core.total_swap


def test_abort_frees_the_blocks() -> None:
    core = tiny()
    core.submit(SimRequest("a", context_tokens=700, max_new_tokens=100))
    for _ in range(5):
        core.step()
    assert core.free_blocks < core.total_blocks
    assert core.abort("a") is not None
    assert core.free_blocks == core.total_blocks
    assert core.counters.finished == {"abort": 1}
    assert not core.has_work()


def test_a_handoff_skips_the_prefill_cost_on_the_decode_side() -> None:
    cpu = load_profile("cpu-kunpeng920-q4")
    prefilled = EngineCore(cpu)
    cold = prefilled.submit(SimRequest("cold", context_tokens=2048, max_new_tokens=4))
    drain(prefilled)
    handed = EngineCore(cpu)
    warm = handed.submit(SimRequest("warm", context_tokens=2048, max_new_tokens=4, kv_ready_tokens=2047, kv_delay=0.02))
    drain(handed)
    assert cold.first_token is not None and warm.first_token is not None
    assert warm.first_token >= 0.02  # waited for the KV to arrive
    assert warm.first_token < cold.first_token / 100
    assert handed.counters.prompt_tokens == 1  # only the last prompt token is recomputed
    assert prefilled.counters.prompt_tokens == 2048
    assert handed.counters.cached_prompt_tokens == 2047


def test_a_request_waits_while_its_kv_arrives() -> None:
    core = tiny()
    busy = core.submit(SimRequest("busy", context_tokens=10, max_new_tokens=500))
    seq = core.submit(SimRequest("w", context_tokens=100, max_new_tokens=2, kv_ready_tokens=99, kv_delay=1.0))
    core.step()
    assert seq.state is State.LOADING
    assert core.num_waiting == 1 and core.num_running == 1
    while seq.first_token is None:
        core.step()
    assert seq.first_token > 1.0
    assert busy.state is State.RUNNING


def test_an_idle_engine_moves_its_clock_to_the_kv_arrival() -> None:
    core = tiny()
    core.submit(SimRequest("w", context_tokens=100, max_new_tokens=2, kv_ready_tokens=99, kv_delay=1.0))
    result = core.step()
    assert result is not None and result.start == pytest.approx(1.0) and result.tokens


@pytest.mark.parametrize("profile", ["tiny", "gpu-a100"])
def test_fast_forward_matches_stepping(profile: str) -> None:
    def run(fast: bool) -> list[Seq]:
        core = EngineCore(load_profile(profile))
        seqs = [core.submit(SimRequest(f"r{i}", context_tokens=100 + 37 * i, max_new_tokens=20 + 13 * (i % 7)))
                for i in range(30)]
        drain(core, fast=fast)
        assert core.free_blocks == core.total_blocks
        return seqs

    for a, b in zip(run(False), run(True), strict=True):
        assert a.generated == b.generated
        assert a.first_token == pytest.approx(b.first_token, rel=1e-9)
        assert a.finished_at == pytest.approx(b.finished_at, rel=1e-9)


def test_held_kv_stays_until_released_or_timed_out() -> None:
    core = tiny()
    core.submit(SimRequest("p", context_tokens=500, max_new_tokens=1, hold_kv=True))
    drain(core)
    assert core.free_blocks < core.total_blocks
    assert core.release("p")
    assert core.free_blocks == core.total_blocks
    core.submit(SimRequest("q", context_tokens=500, max_new_tokens=1, hold_kv=True))
    drain(core)
    core.expire_held(core.now + HOLD_TIMEOUT - 1)
    assert core.held
    core.expire_held(core.now + HOLD_TIMEOUT + 1)
    assert not core.held and core.free_blocks == core.total_blocks


def test_zero_new_tokens_finishes_after_the_prefill() -> None:
    core = tiny()
    seq = core.submit(SimRequest("n0", context_tokens=300, max_new_tokens=0))
    drain(core)
    assert seq.generated == 0 and seq.finish_reason == "length"
    assert core.counters.prompt_tokens == 300


def test_finish_reason_is_the_requests() -> None:
    core = tiny()
    seq = core.submit(SimRequest("s", context_tokens=10, max_new_tokens=5, finish_reason="scheduled"))
    drain(core)
    assert seq.finish_reason == "scheduled"
    assert core.counters.finished == {"scheduled": 1}


def test_duplicate_request_ids_are_refused() -> None:
    core = tiny()
    core.submit(SimRequest("x", context_tokens=10, max_new_tokens=5))
    with pytest.raises(ValueError, match="duplicate"):
        core.submit(SimRequest("x", context_tokens=10, max_new_tokens=5))
