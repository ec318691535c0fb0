"""The simulator's mixture-of-experts step model, the runner's books and its deadline-ordered queue."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import sim
from sim import timing
from sim.profile import ProfileError, load_profile, parse_profile, sources
from sim.runner import EngineSpec, RunOptions, run
from sim.traces import TraceRequest, burst, load_trace
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import Snapshot

MOE = load_profile("gpu-l4-qwen3moe")
GPU = EngineSpec("gpu0", "gpu", load_profile("tiny"))
A100 = EngineSpec("gpu0", "gpu", load_profile("gpu-a100"))


def test_a_dense_step_reads_every_weight() -> None:
    dense = load_profile("gpu-a100")
    assert timing.weight_bytes_read(dense, 1) == timing.weight_bytes_read(dense, 4096) == dense.weight_bytes


def test_a_moe_decode_reads_the_experts_its_tokens_touch() -> None:
    dense_part = MOE.weight_bytes - MOE.expert_bytes
    one = timing.weight_bytes_read(MOE, 1)
    assert one == pytest.approx(dense_part + MOE.expert_bytes * 8 / 128)
    assert timing.weight_bytes_read(MOE, 4) == pytest.approx(dense_part + MOE.expert_bytes * (1 - (1 - 8 / 128) ** 4))
    assert timing.weight_bytes_read(MOE, 2048) == pytest.approx(MOE.weight_bytes)  # a prefill chunk: all of them
    # So one stream decodes several times faster than the total size suggests, and batching costs more bytes.
    assert timing.decode_step_time(MOE, [1000]) * 3 < timing.decode_step_time(MOE.variant(experts=0), [1000])
    assert timing.decode_step_time(MOE, [1000] * 16) > 2 * timing.decode_step_time(MOE, [1000])


def test_a_moe_decode_run_matches_its_single_steps() -> None:
    steps = sum(timing.decode_step_time(MOE, [500 + j] * 8) for j in range(20))
    assert timing.decode_run_time(MOE, 8, 8 * 500, 20) == pytest.approx(steps, rel=1e-9)


def test_moe_profiles_name_a_source_for_every_moe_number() -> None:
    for name in ("gpu-l4-qwen3moe", "cpu-xeon-amx-qwen3moe"):
        numbers = sources(name)
        assert {"moe.experts", "moe.experts_per_token", "moe.expert_bytes"} <= set(numbers)
        assert load_profile(name).experts == 128


def test_a_moe_section_is_checked() -> None:
    data = yaml.safe_load((Path(sim.__file__).parent / "profiles" / "gpu-l4-qwen3moe.yaml").read_text(encoding="utf-8"))
    data["moe"]["experts_per_token"] = {"value": 200, "source": "typo"}
    with pytest.raises(ProfileError, match="experts_per_token 200 > moe.experts 128"):
        parse_profile(data, "bad")
    del data["moe"]["expert_bytes"]
    with pytest.raises(ProfileError, match="missing moe.expert_bytes"):
        parse_profile(data, "bad")


def test_the_policy_sees_the_conductors_token_books_and_the_kv_capacity() -> None:
    seen: list[Snapshot] = []

    def watch(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        seen.append(snap)
        return Decision("gpu", Mode.WHOLE, None, "watch")

    run(burst(3, 100, 20), [GPU], watch)
    third = seen[2].engines[0]
    assert third.inflight_decode_tokens == 40 and third.scheduled_prompt_tokens == 200
    assert third.metrics.kv_capacity_tokens == GPU.profile.kv_capacity_tokens


def test_the_policy_sees_each_started_answer_its_age_and_max_tokens() -> None:
    seen: list[Snapshot] = []

    def watch(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        seen.append(snap)
        return Decision("gpu", Mode.WHOLE, None, "watch")

    # The first answer (400 tokens) is running when the second arrives, over when the third does.
    run([TraceRequest(0.0, 100, 400), TraceRequest(2.0, 100, 50), TraceRequest(300.0, 100, 50)], [GPU], watch)
    assert seen[0].engines[0].answers == ()
    (age, most), = seen[1].engines[0].answers
    assert most == 400 and 1.0 < age < 2.0
    assert seen[2].engines[0].answers == ()


def _gate(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
    """One request at a time on the GPU."""
    if snap.on("gpu")[0].inflight >= 1:
        return Decision(None, Mode.WHOLE, None, "hold")
    return Decision("gpu", Mode.WHOLE, None, "room")


def _queue_run(order: str) -> list[float | None]:
    # One long request (~12 s), three at once while it runs (late by the time it ends), a
    # fifth at 8 s (still on time then); one request at a time, ~3 s each.
    reqs = [TraceRequest(0.0, 100, 400)] + [TraceRequest(0.1, 100, 100)] * 3 + [TraceRequest(8.0, 100, 100)]
    result = run(reqs, [A100], _gate, Limits(ttft_target=5.0),
                 RunOptions(queue_order=order))  # type: ignore[arg-type]
    return [r.ttft for r in sorted(result.requests, key=lambda r: r.index)]


def test_the_deadline_queue_serves_a_request_still_on_time_before_late_ones() -> None:
    fifo, deadline = _queue_run("fifo"), _queue_run("deadline")
    assert fifo[4] is not None and deadline[4] is not None
    assert deadline[4] < 5.0 < fifo[4]  # on time only when it may pass the three late ones
    assert all(t is not None for t in deadline[1:4])  # the late ones are still served, after it


def test_whole_second_timestamps_are_spread_within_their_second(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "grid.csv"
    rows = [f"2024-05-10 00:00:{s:02d},100,10" for s in (0, 0, 0, 1, 1, 2)]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n", encoding="utf-8")
    times = [r.arrival for r in load_trace(str(path), seed=3)]
    assert len(set(times)) == 6 and times == sorted(times) and times[0] == 0.0
    assert max(times) < 3.0


def test_the_policy_is_told_how_long_a_queued_request_has_waited() -> None:
    waited: dict[str, float] = {}

    def gate(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        waited[req.request_id] = req.waited
        return _gate(snap, req, limits)

    run([TraceRequest(0.0, 100, 200), TraceRequest(0.5, 100, 10)], [A100], gate)
    assert waited["0"] == 0.0
    assert waited["1"] > 5.0  # asked again when the first one ended, ~6 s after it arrived
