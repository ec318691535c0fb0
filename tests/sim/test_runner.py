"""The virtual-time runner with small routing functions of our own."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sim.profile import load_profile
from sim.runner import EngineSpec, RunOptions, run
from sim.traces import TRACE_DIR_ENV, TraceError, TraceRequest, burst, load_trace, synthetic
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures, ServiceLevel
from syshaxd.snapshot import Snapshot
from tests.shared import shared

GPU = EngineSpec("gpu0", "gpu", load_profile("gpu-a100"))
CPU = EngineSpec("cpu0", "cpu", load_profile("cpu-kunpeng920-q4"))


def to(device: str, mode: Mode = Mode.WHOLE, limit: int | None = None):  # type: ignore[no-untyped-def]
    def policy(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        return Decision(device, mode, limit, f"always {device}")  # type: ignore[arg-type]
    return policy


def test_same_inputs_same_result() -> None:
    work = synthetic(300, rate=1.0, prompt_tokens=100, output_tokens=60, spread=0.5, seed=3)

    def alternate(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        return Decision("gpu" if int(req.request_id) % 3 else "cpu", Mode.WHOLE, 40, "alternate")

    a = run(work, [GPU, CPU], alternate).to_json(with_requests=True)
    b = run(work, [GPU, CPU], alternate).to_json(with_requests=True)
    assert a == b
    assert a["summary"]["completed"] == 300


def test_ten_thousand_requests_complete() -> None:
    work = synthetic(10_000, rate=3.0, prompt_tokens=400, output_tokens=60, spread=0.6, seed=1)
    result = run(work, [GPU, CPU], to("gpu"))
    assert result.summary.completed == 10_000
    assert result.summary.output_tokens == sum(r.output_tokens for r in work)
    assert 0 < result.summary.devices["gpu"].utilisation <= 1
    assert result.summary.ttft["p50"] < result.summary.e2e["p50"]


def test_no_capacity_queues_and_asks_again_when_something_finishes() -> None:
    seen: list[int] = []

    def two_at_a_time(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        gpu = snap.on("gpu")[0]
        seen.append(gpu.inflight)
        if gpu.inflight >= 2:
            return Decision(None, Mode.WHOLE, None, "full")
        return Decision("gpu", Mode.WHOLE, None, "room")

    result = run(burst(8, 500, 50), [GPU], two_at_a_time)
    assert result.summary.completed == 8
    assert result.decisions["queued"] == 6  # two are routed, the rest wait in order
    assert max(seen) == 2
    ttfts = sorted(r.ttft for r in result.requests if r.ttft is not None)
    assert ttfts[-1] > 3 * ttfts[0]  # the last waited for three rounds to finish


@pytest.mark.parametrize("handoff,gpu_tokens", [("syshax", 2), ("recompute", 1), ("kv-transfer", 0), ("llamacpp-slots", 0)])
def test_pd_split_prefills_on_the_gpu_and_decodes_on_the_cpu(handoff: str, gpu_tokens: int) -> None:
    work = burst(3, 2048, 40)
    split = run(work, [GPU, CPU], to("cpu", Mode.PD_SPLIT), Limits(handoff=handoff))  # type: ignore[arg-type]
    whole_cpu = run(work, [GPU, CPU], to("cpu"))
    assert split.summary.completed == 3
    for r in split.requests:
        assert r.route == "split"
        assert r.gpu_tokens == gpu_tokens and r.cpu_tokens == 40 - gpu_tokens
    # the CPU never prefills 2048 tokens itself unless the protocol makes it recompute
    assert split.summary.ttft["mean"] < whole_cpu.summary.ttft["mean"] / 5


def test_the_syshax_handoff_stops_the_cpu_at_its_token_limit_and_asks_again_and_a_whole_request_runs_on() -> None:
    generated: list[int] = []

    def cpu_in_tens(mode: Mode):  # type: ignore[no-untyped-def]
        def policy(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
            generated.append(req.generated_tokens)
            return Decision("cpu", mode, 10, "segments of ten")
        return policy

    split = run([TraceRequest(0.0, 50, 35)], [GPU, CPU], cpu_in_tens(Mode.PD_SPLIT), Limits(handoff="syshax"))
    record = split.requests[0]
    assert record.outcome == "ok" and record.output_tokens == 35 and record.cpu_tokens == 33
    assert record.reasks == 3
    assert generated == [0, 12, 22, 32]  # the GPU wrote two, then segments of ten
    generated.clear()
    whole = run([TraceRequest(0.0, 50, 35)], [GPU, CPU], cpu_in_tens(Mode.WHOLE), Limits(handoff="syshax"))
    assert whole.requests[0].cpu_tokens == 35 and whole.requests[0].reasks == 0  # as the daemon: whole is whole
    assert generated == [0]


def test_full_queue_rejects_and_timeout_ends_requests() -> None:
    def never(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        return Decision(None, Mode.WHOLE, None, "never")

    result = run(burst(5, 100, 10), [GPU], never, options=RunOptions(max_queue=2, timeout=30.0))
    assert result.summary.rejected == 3 and result.summary.timed_out == 2 and result.summary.completed == 0


def test_policy_sees_scraped_metrics_and_live_counts() -> None:
    snaps: list[Snapshot] = []

    def watch(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        snaps.append(snap)
        return Decision("gpu", Mode.WHOLE, None, "watch")

    run(synthetic(200, rate=10.0, prompt_tokens=1000, output_tokens=200, seed=2), [GPU], watch)
    late = [s.engines[0] for s in snaps if s.taken_at > 5]
    assert any((v.metrics.decode_tps or 0) > 0 for v in late)
    assert any((v.metrics.kv_cache_usage or 0) > 0 for v in late)
    assert any(v.inflight > 0 for v in late)
    assert all(v.metrics.running is not None for v in late)


def test_too_long_requests_are_errors_not_hangs() -> None:
    result = run([TraceRequest(0.0, 9000, 10), TraceRequest(0.0, 100, 10)], [GPU], to("gpu"))
    assert [r.outcome for r in result.requests] == ["error", "ok"]


def test_device_shares_and_utilisation() -> None:
    work = synthetic(400, rate=0.5, prompt_tokens=30, output_tokens=40, seed=4)

    def by_index(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        return Decision("cpu" if int(req.request_id) % 4 == 0 else "gpu", Mode.WHOLE, None, "quarter")

    s = run(work, [GPU, CPU], by_index).summary
    assert s.routes == {"gpu": 300, "cpu": 100}
    assert s.devices["cpu"].request_share == pytest.approx(0.25)
    assert s.devices["gpu"].token_share == pytest.approx(0.75)
    assert 0 < s.devices["cpu"].utilisation <= 1 and 0 < s.devices["gpu"].utilisation <= 1


@pytest.fixture
def shared_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Named traces come from the workspace's shared/traces (the test fails clearly when it is missing)."""
    monkeypatch.setenv(TRACE_DIR_ENV, str(shared("traces")))


@pytest.mark.usefixtures("shared_traces")
def test_azure_trace_keeps_its_arrival_times() -> None:
    work = load_trace("azure-conv", limit=500)
    assert len(work) == 500 and work[0].arrival == 0.0
    assert all(a.arrival <= b.arrival for a, b in zip(work, work[1:], strict=False))
    assert (work[1].prompt_tokens, work[1].output_tokens) == (396, 109)
    denser = load_trace("azure-conv", limit=500, time_scale=0.5)
    assert denser[-1].arrival == pytest.approx(work[-1].arrival / 2)
    at_rate = load_trace("azure-conv", limit=500, rate=2.0)
    assert (len(at_rate) - 1) / at_rate[-1].arrival == pytest.approx(2.0)


@pytest.mark.usefixtures("shared_traces")
@pytest.mark.parametrize("name", ["sharegpt", "arxiv"])
def test_length_traces_get_seeded_poisson_arrivals(name: str) -> None:
    a = load_trace(name, limit=2000, rate=5.0, seed=1)
    assert a == load_trace(name, limit=2000, rate=5.0, seed=1)
    assert a != load_trace(name, limit=2000, rate=5.0, seed=2)
    assert (len(a) - 1) / a[-1].arrival == pytest.approx(5.0, rel=0.1)


def test_unreadable_traces_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(TraceError, match="unknown trace format"):
        load_trace(str(bad))
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(str(tmp_path / "absent.csv"))
    broken = tmp_path / "y.csv"
    broken.write_text("num_prefill_tokens,num_decode_tokens\n5,x\n", encoding="utf-8")
    with pytest.raises(TraceError, match="y.csv:2"):
        load_trace(str(broken))


def test_synthetic_rate_and_lengths() -> None:
    work = synthetic(5000, rate=8.0, prompt_tokens=100, output_tokens=20, seed=9)
    assert (len(work) - 1) / work[-1].arrival == pytest.approx(8.0, rel=0.05)
    assert {r.prompt_tokens for r in work} == {100}
    bursty = synthetic(5000, rate=8.0, cv=3.0, seed=9)
    gaps = [b.arrival - a.arrival for a, b in zip(bursty, bursty[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    assert cv > 2


def test_several_engines_per_device_share_the_load_or_follow_the_decision() -> None:
    engines = [EngineSpec("gpu0", "gpu", load_profile("gpu-a100")), EngineSpec("gpu1", "gpu", load_profile("gpu-a100"))]
    work = synthetic(200, rate=20.0, prompt_tokens=500, output_tokens=100, seed=6)
    spread = run(work, engines, to("gpu"))
    assert spread.summary.completed == 200 and spread.summary.devices["gpu"].engines == 2

    def pinned(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        return Decision("gpu", Mode.WHOLE, None, "pinned", engine="gpu1")

    conductor_seen: list[tuple[int, int]] = []

    def watch(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        conductor_seen.append((snap.engine("gpu0").inflight, snap.engine("gpu1").inflight))  # type: ignore[union-attr]
        return pinned(snap, req, limits)

    run(work, engines, watch)
    assert max(a for a, _ in conductor_seen) == 0 and max(b for _, b in conductor_seen) > 1
    balanced: list[tuple[int, int]] = []

    def watch_spread(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        balanced.append((snap.engine("gpu0").inflight, snap.engine("gpu1").inflight))  # type: ignore[union-attr]
        return Decision("gpu", Mode.WHOLE, None, "any")

    run(work, engines, watch_spread)
    assert max(a for a, _ in balanced) > 1 and max(b for _, b in balanced) > 1


def test_the_startup_check_measures_every_engine_before_the_first_request() -> None:
    """As the live daemon's startup check: the policy knows each engine's decode speed at once."""

    def watching(seen: list[Snapshot]):  # type: ignore[no-untyped-def]
        def policy(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
            seen.append(snap)
            return Decision("gpu", Mode.WHOLE, None, "watch")
        return policy

    work = [TraceRequest(0.0, 100, 10), TraceRequest(0.5, 100, 10)]
    checked: list[Snapshot] = []
    result = run(work, [GPU, CPU], watching(checked))
    first = {e.name: e.metrics.tpot_recent for e in checked[0].engines}
    assert first["cpu0"] is not None and first["gpu0"] is not None
    assert first["cpu0"] > 3 * first["gpu0"]  # the Kunpeng's measured TPOT, not a default
    # The check is no request of the run: two requests, two decisions, nothing on the CPU.
    assert result.summary.completed == 2 and sum(result.decisions.values()) == 2
    assert all(r.cpu_tokens == 0 for r in result.requests)

    blind: list[Snapshot] = []
    run(work, [GPU, CPU], watching(blind), options=RunOptions(startup_check=False))
    assert all(e.metrics.tpot_recent is None for e in blind[0].engines)


def test_each_request_is_judged_at_its_own_class_targets_and_refusals_are_counted_by_reason() -> None:
    batch = ServiceLevel("batch", ttft=60.0, tpot=1.0, priority=1)
    shed = ServiceLevel("sheddable", priority=2, sheddable=True, late="refuse")
    # Ten long prompts at once on one GPU that runs one at a time: the later ones wait for
    # tens of seconds, past the interactive 5 s target but within the batch class's minute.
    # The sheddable ones wait first; a full line sheds two of them, and the third is refused
    # once it cannot meet its 5 s target (its class refuses late work).
    work = ([TraceRequest(0.0, 2000, 200)] + [TraceRequest(0.0, 2000, 200, level=shed) for _ in range(3)]
            + [TraceRequest(0.0, 2000, 200, level=batch) for _ in range(5)]
            + [TraceRequest(0.0, 2000, 200) for _ in range(4)])

    def one_at_a_time(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        if snap.on("gpu")[0].inflight >= 1:
            return Decision(None, Mode.WHOLE, None, "full")
        return Decision("gpu", Mode.WHOLE, None, "room")

    result = run(work, [GPU], one_at_a_time, options=RunOptions(max_queue=10))
    classes = result.summary.classes
    assert set(classes) == {"batch", "interactive", "sheddable"}
    assert classes["sheddable"].refusals == {"shed": 2, "ttft_expired": 1} and classes["sheddable"].met == 0
    by = {r.index: r for r in result.requests}
    interactive = [by[i] for i in (0, 9, 10, 11, 12)]
    batches = [by[i] for i in range(4, 9)]
    assert all(r.outcome == "ok" for r in interactive + batches)
    # interactive goes first (priority 0), batch after
    assert max(r.ttft or 0.0 for r in interactive) < min(r.ttft or 0.0 for r in batches)
    assert classes["interactive"].met == sum((r.ttft or 0.0) <= 5.0 and (r.tpot or 0.0) <= 0.2 for r in interactive)
    assert classes["interactive"].met < 5  # the fifth interactive one waits past 5 s
    late_but_within_a_minute = [r for r in batches if 5.0 < (r.ttft or 0.0) <= 60.0]
    assert late_but_within_a_minute and all(r.met for r in late_but_within_a_minute)
    assert classes["batch"].met == sum(r.met for r in batches) and classes["batch"].refusals == {}
