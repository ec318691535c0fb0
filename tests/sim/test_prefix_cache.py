"""Automatic prefix caching in the engine core: shared prompt blocks are not prefilled again."""

from __future__ import annotations

import pytest

from sim import timing
from sim.core import EngineCore, Seq, SimRequest
from sim.metrics import Recorder
from sim.profile import load_profile
from sim.runner import EngineSpec, RunOptions, VirtualConductor
from sim.traces import TraceRequest
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures
from syshaxd.snapshot import Snapshot

TINY = load_profile("tiny")  # 256 blocks of 16 tokens, prefill chunks of 512 tokens


def to(device: str):  # type: ignore[no-untyped-def]
    def policy(snap: Snapshot, req: RequestFeatures, limits: Limits) -> Decision:
        return Decision(device, Mode.WHOLE, None, f"always {device}")  # type: ignore[arg-type]
    return policy


def replay(work: list[TraceRequest], device: str = "gpu") -> tuple[list[float], EngineCore]:
    """Each request's TTFT through the virtual runner on one tiny engine, and that engine's core."""
    # No startup check: its test generation would add to the counters these tests pin.
    conductor = VirtualConductor([EngineSpec("e0", device, TINY.variant(device=device))], to(device), Limits(),
                                 RunOptions(startup_check=False))
    result = conductor.run(work)
    ttfts = [r.ttft for r in sorted(result.requests, key=lambda r: r.index)]
    assert all(t is not None for t in ttfts)
    return [t for t in ttfts if t is not None], conductor.engines["e0"].core


def drain(core: EngineCore) -> list[Seq]:
    done: list[Seq] = []
    while core.has_work():
        result = core.step()
        if result is not None:
            done.extend(result.finished)
    return done


def test_a_shared_three_block_prefix_is_not_prefilled_again() -> None:
    first = TraceRequest(0.0, 1800, 4, prefix=(1, 2, 3, 4))
    shared, _ = replay([first, TraceRequest(10.0, 1800, 4, prefix=(1, 2, 3, 9))])
    alone, core = replay([first, TraceRequest(10.0, 1800, 4, prefix=(5, 6, 7, 9))])
    # unshared: chunks of 512 at 0, 512 and 1024 cached tokens, then 264 more and the first
    # token; shared: only the last chunk, so the TTFT drops by the three chunks' time
    three_blocks = sum(timing.step_time(TINY, [(512, c)]) for c in (0, 512, 1024))
    assert alone[1] - shared[1] == pytest.approx(three_blocks, rel=1e-9)
    assert shared[0] == alone[0] == pytest.approx(alone[1])
    assert core.counters.prefix_cache_hit_tokens == 0


def test_hits_are_counted_and_the_last_prompt_token_is_always_computed() -> None:
    _, core = replay([TraceRequest(0.0, 1024, 4, prefix=(1, 2)), TraceRequest(10.0, 1024, 4, prefix=(1, 2))])
    c = core.counters
    assert c.prefix_cache_hit_tokens == 1024 - 16  # whole blocks up to the prompt's last token
    assert c.prompt_tokens == 1024 + 16
    text = Recorder(core, "vllm-v1").render("m", core.now)
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1008' in text
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 2048' in text


def test_a_request_without_hashes_shares_nothing() -> None:
    ttfts, core = replay([TraceRequest(0.0, 1024, 4), TraceRequest(10.0, 1024, 4)])
    assert ttfts[0] == pytest.approx(ttfts[1])
    assert core.counters.prefix_cache_hit_tokens == 0
    assert core.counters.prompt_tokens == 2 * 1024


def test_prefixes_nobody_shares_change_nothing() -> None:
    # requests overlap but none is preempted (a preempted one would find its own blocks again)
    plain = [TraceRequest(0.2 * i, 100 + 13 * i, 10 + i % 7) for i in range(60)]
    unique = [TraceRequest(r.arrival, r.prompt_tokens, r.output_tokens, prefix=(1000 + i, 2000 + i, 3000 + i))
              for i, r in enumerate(plain)]
    a, core_a = replay(plain)
    b, core_b = replay(unique)
    assert a == b
    assert core_a.counters.busy_time == core_b.counters.busy_time
    assert core_a.counters.preemptions == 0 and core_b.counters.prefix_cache_hit_tokens == 0
    assert core_b.prefix_cache.evictable > 200  # the cache filled up and evicted: that too changes nothing


def test_the_cpu_engine_caches_no_prefix() -> None:
    ttfts, core = replay([TraceRequest(0.0, 1024, 4, prefix=(1, 2)), TraceRequest(60.0, 1024, 4, prefix=(1, 2))], "cpu")
    assert ttfts[0] == pytest.approx(ttfts[1])
    assert core.counters.prefix_cache_hit_tokens == 0


def test_an_evicted_prefix_is_prefilled_again() -> None:
    a = TraceRequest(0.0, 1536, 2, prefix=(1, 2, 3))
    fillers = [TraceRequest(10.0 * i, 2000, 2, prefix=(100 + i, 200 + i, 300 + i, 400 + i)) for i in (1, 2)]
    again = TraceRequest(30.0, 1536, 2, prefix=(1, 2, 3))
    # one filler: A's 96 blocks and the filler's 125 fit the 256 with room to spare
    kept, core = replay([a, fillers[0], again])
    assert core.counters.prefix_cache_hit_tokens == 1536 - 16
    # a second filler needs blocks only A's (least recently freed) can give
    evicted, core = replay([a, *fillers, again])
    assert core.counters.prefix_cache_hit_tokens == 0
    assert evicted[-1] == pytest.approx(evicted[0])
    assert evicted[-1] > 2 * kept[-1]


def test_eviction_takes_the_tail_first_and_only_what_is_needed() -> None:
    core = EngineCore(TINY)
    core.submit(SimRequest("a", 1536, 1, prefix=(1, 2, 3)))
    drain(core)
    assert core.prefix_cache.evictable == 96 and core.free_blocks == 256
    core.submit(SimRequest("big", 2800, 1))  # 175 blocks: 81 stay free, so one of A's three blocks goes
    drain(core)
    assert core.prefix_cache.evictable == 64
    again = core.submit(SimRequest("a2", 1536, 1, prefix=(1, 2, 3)))
    drain(core)
    assert core.counters.prefix_cache_hit_tokens == 1024  # its first two blocks were still cached
    assert again.prefill_done == 1536 - 1024
    assert core.free_blocks == 256


def test_running_requests_share_blocks_and_their_blocks_cannot_be_evicted() -> None:
    core = EngineCore(TINY)
    first = core.submit(SimRequest("a", 1024, 200, prefix=(1, 2)))
    core.step()
    core.step()  # both blocks computed: cached, referenced by the running request
    second = core.submit(SimRequest("b", 1100, 200, prefix=(1, 2, 3)))
    core.step()
    assert second.num_computed == 1100 and second.prefill_done == 1100 - 1024
    assert first.shared == 64  # its two blocks
    assert second.shared == 64 + 4  # a's two blocks and the whole engine blocks of its own third
    assert 256 - core.free_blocks == 64 + 1 + 5  # shared once; a's first output block; b's own
    assert core.prefix_cache.evictable == 0
    drain(core)
    assert core.free_blocks == 256 and core.prefix_cache.evictable == 64 + 4
