"""The monitor and the startup check against real simulator processes on loopback.

Transitions are driven by the simulator's ``/metrics`` faults (garbage, hang, contradictory)
and by killing the process; rounds are run one at a time with ``poll_once`` so each test
counts misses exactly, except where the background loop itself is under test. A round
waits for its scrapes up to ``monitor.interval``: the rounds a test runs by hand have a
long one, so an answer counts however slowly a busy machine delivers it, and only a
fault makes a miss.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from syshaxd.config import EngineSpec, ModelParams
from syshaxd.config import Monitor as MonitorSettings
from syshaxd.monitor.monitor import Monitor
from syshaxd.service.startup import startup_check
from syshaxd.snapshot import EngineState, EngineView, Snapshot
from tests.plugins.ports import free_port

SETTINGS = MonitorSettings(interval=60.0, scrape_timeout=5.0, stale_after=2, down_after=4, startup_check=False)
#: What the background loop runs on: a round every 0.2 s.
BACKGROUND = SETTINGS.model_copy(update={"interval": 0.2})
DIALECTS = ["vllm-v1", "vllm-v0", "llamacpp", "sglang"]

MakeMonitor = Callable[..., Monitor]


@pytest.fixture
async def make_monitor() -> AsyncIterator[MakeMonitor]:
    """Monitors over real engines; each is stopped and its client closed at teardown.

    ``background=True`` starts the monitor's own loop; otherwise the test runs rounds
    with ``poll_once`` on a client the fixture owns.
    """
    built: list[tuple[Monitor, httpx.AsyncClient | None]] = []

    async def start(specs: list[EngineSpec], settings: MonitorSettings = SETTINGS, *, background: bool = False,
                    **kw: Any) -> Monitor:
        kw.setdefault("sample_host", False)
        client = None if background else httpx.AsyncClient(timeout=settings.scrape_timeout)
        monitor = Monitor(specs, settings, client=client, **kw)
        built.append((monitor, client))
        if background:
            await monitor.start()
        return monitor

    yield start  # type: ignore[misc]
    for monitor, client in built:
        await monitor.stop()
        if client is not None:
            await client.aclose()


def spec(handle: Any, dialect: str, name: str = "e0", device: str = "gpu") -> EngineSpec:
    return EngineSpec(name, device, handle.url, dialect, "recompute")  # type: ignore[arg-type]


def view(s: Snapshot, name: str = "e0") -> EngineView:
    found = s.engine(name)
    assert found is not None
    return found


async def rounds(monitor: Monitor, n: int) -> list[EngineState]:
    return [view(await monitor.poll_once()).state for _ in range(n)]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_up_stale_down_up_with_metrics_faults(sim_engine: Any, make_monitor: Any, dialect: str) -> None:
    engine = sim_engine("tiny", dialect=dialect)
    monitor = await make_monitor([spec(engine, dialect)])
    up = view(await monitor.poll_once())
    assert up.state is EngineState.UP, up.last_error
    assert up.metrics.running == 0 and up.metrics.waiting == 0
    assert up.metrics.generation_tokens_total == 0

    await asyncio.to_thread(engine.set_faults, metrics="garbage")
    assert await rounds(monitor, 4) == [EngineState.UP, EngineState.STALE, EngineState.STALE, EngineState.DOWN]
    assert "unreadable answer" in (view(monitor.snapshot()).last_error or "")

    await asyncio.to_thread(engine.clear_faults)
    back = view(await monitor.poll_once())
    assert back.state is EngineState.UP and back.last_error is None


async def test_hanging_metrics_go_stale_then_down_and_recover(sim_engine: Any, make_monitor: Any) -> None:
    engine = sim_engine("tiny", dialect="vllm-v1")
    monitor = await make_monitor([spec(engine, "vllm-v1")])
    assert await rounds(monitor, 1) == [EngineState.UP]
    await asyncio.to_thread(engine.set_faults, metrics="hang")
    monitor.set_interval(0.2)  # a round does not wait for a scrape that hangs: each one is a miss
    assert await rounds(monitor, 6) == [EngineState.UP, EngineState.STALE, EngineState.STALE,
                                        EngineState.DOWN, EngineState.DOWN, EngineState.DOWN]
    assert (view(monitor.snapshot()).last_error or "").startswith("no answer to /metrics yet")
    await asyncio.to_thread(engine.clear_faults)
    monitor.set_interval(SETTINGS.interval)
    # The scrape still hanging runs into its timeout (a miss), then the next one answers.
    states = await rounds(monitor, 2)
    assert EngineState.UP in states, states


async def test_contradictory_numbers_are_dropped_and_the_engine_stays_up(sim_engine: Any, make_monitor: Any) -> None:
    engine = sim_engine("tiny", dialect="vllm-v1")
    monitor = await make_monitor([spec(engine, "vllm-v1")])
    await asyncio.to_thread(engine.set_faults, metrics="contradictory")
    v = view(await monitor.poll_once())
    assert v.state is EngineState.UP
    assert v.metrics.running is None  # -1 requests is not a count
    assert v.metrics.kv_cache_usage is None  # 1.7 is not a fraction


async def test_killed_process_is_down_at_once(sim_engine: Any, make_monitor: Any) -> None:
    engine = sim_engine("tiny", dialect="sglang")
    monitor = await make_monitor([spec(engine, "sglang")])
    assert await rounds(monitor, 1) == [EngineState.UP]
    await asyncio.to_thread(sim_engine.process(engine).stop)
    v = view(await monitor.poll_once())
    assert v.state is EngineState.DOWN
    assert "cannot connect" in (v.last_error or "")


async def _load(url: str, n: int, max_tokens: int) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        body = {"model": "ds-32b", "prompt": "hello " * 20, "max_tokens": max_tokens, "ignore_eos": True}
        responses = await asyncio.gather(*(client.post(f"{url}/v1/completions", json=body) for _ in range(n)))
    assert all(r.status_code == 200 for r in responses)


def _rated(seen: list[EngineView], dialect: str) -> bool:
    """Rounds have shown requests running and their tokens rated (for llama.cpp also KV use)."""
    return (any((v.metrics.running or 0) >= 1 for v in seen) and any((v.metrics.decode_tps or 0) > 0 for v in seen)
            and (dialect != "llamacpp" or any((v.metrics.kv_cache_usage or 0) > 0 for v in seen)))


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_load_shows_running_requests_and_token_rates(sim_engine: Any, make_monitor: Any, dialect: str) -> None:
    engine = sim_engine("tiny", dialect=dialect, speed=1.0)
    monitor = await make_monitor([spec(engine, dialect)])
    await monitor.poll_once()
    # Rounds while four long answers run (10 s each: far longer than the rounds it takes),
    # until they have shown them rated; then the clients leave.
    load = asyncio.create_task(_load(engine.url, n=4, max_tokens=1000))
    seen: list[EngineView] = []
    try:
        while not load.done() and not _rated(seen, dialect):
            seen.append(view(await monitor.poll_once()))
    finally:
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
    assert all(v.state is EngineState.UP for v in seen)
    # Tokens are rated while the requests run -- for llama.cpp too, whose counter moves only
    # when a request ends: the monitor adds what /slots shows decoded so far (and its KV use).
    assert _rated(seen, dialect), [v.metrics for v in seen]
    # Answers that end are counted whole, and their time per token is seen.
    before = view(await monitor.poll_once()).metrics.generation_tokens_total or 0
    await _load(engine.url, n=4, max_tokens=20)
    final = view(await monitor.poll_once())
    assert final.metrics.generation_tokens_total is not None
    assert final.metrics.generation_tokens_total >= before + 4 * 20
    assert any(v.metrics.tpot_recent for v in [*seen, final])


@pytest.mark.parametrize("dialect", ["vllm-v1", "llamacpp"])
async def test_the_prefill_speed_is_measured_from_the_engines_prefill_seconds(
        sim_engine: Any, make_monitor: Any, dialect: str) -> None:
    """``tiny`` prefills at 0.2 ms a token (5,000 tokens/s): the monitor's ``prefill_speed``
    is that figure (lone prompts of ~800 tokens, each also paying one step's fixed part),
    while ``prefill_tps``, the prompt-token rate, is the far smaller demand."""
    engine = sim_engine("tiny", dialect=dialect, speed=1.0)
    monitor = await make_monitor([spec(engine, dialect, device="cpu")])
    assert view(await monitor.poll_once()).metrics.prefill_speed is None
    async with httpx.AsyncClient(timeout=60) as client:
        for k in range(3):
            body = {"model": "ds-32b", "prompt": [100 + k] * 800, "max_tokens": 2}
            assert (await client.post(f"{engine.url}/v1/completions", json=body)).status_code == 200
            await monitor.poll_once()
            await asyncio.sleep(0.3)  # spaces the prompts: the prompt-token rate is the demand, kept low
    metrics = view(await monitor.poll_once()).metrics
    assert metrics.prefill_speed is not None and 3000 < metrics.prefill_speed <= 5100, metrics.prefill_speed
    assert metrics.prefill_tps is not None and metrics.prefill_tps < metrics.prefill_speed / 2


async def test_a_hanging_engine_does_not_hold_up_the_rounds_for_the_others(sim_engine: Any, make_monitor: Any) -> None:
    # The stuck engine's scrape cannot time out while the test runs: every round published
    # meanwhile is one it did not hold up, and the healthy engine is scraped afresh again and
    # again (a scrape slower than a round, on a busy machine, is collected by a later round).
    stuck = sim_engine("tiny", dialect="vllm-v1", faults={"metrics": "hang"}, name="stuck")
    fine = sim_engine("tiny", dialect="vllm-v1", name="fine")
    settings = BACKGROUND.model_copy(update={"scrape_timeout": 600.0})
    monitor = await make_monitor([spec(stuck, "vllm-v1", "gpu0"), spec(fine, "vllm-v1", "cpu0", "cpu")],
                                 settings, background=True)
    rounds: asyncio.Queue[Snapshot] = asyncio.Queue()
    monitor.add_listener(rounds.put_nowait)  # as the daemon follows the rounds
    fresh: list[Snapshot] = []
    seen: set[float] = set()
    for _ in range(200):
        snap = await asyncio.wait_for(rounds.get(), 60)
        at = view(snap, "cpu0").scraped_at
        if at is not None and at not in seen:
            seen.add(at)
            fresh.append(snap)
        if len(fresh) == 4:
            break
    assert len(fresh) == 4, f"only {len(fresh)} fresh scrapes of the healthy engine in 200 rounds"
    assert all(view(s, "cpu0").state is EngineState.UP for s in fresh)
    hung = view(fresh[-1], "gpu0")  # four rounds or more have gone by without its answer
    assert hung.state is EngineState.DOWN and hung.scraped_at is None
    assert (hung.last_error or "").startswith("no answer to /metrics yet"), hung.last_error  # the first scrape, still out


async def test_background_loop_samples_the_host(sim_engine: Any, make_monitor: Any) -> None:
    engine = sim_engine("tiny", dialect="vllm-v1")
    monitor = await make_monitor([spec(engine, "vllm-v1")], BACKGROUND, background=True, sample_host=True)
    rounds: asyncio.Queue[Snapshot] = asyncio.Queue()
    monitor.add_listener(rounds.put_nowait)
    await asyncio.wait_for(rounds.get(), 60)
    s = await asyncio.wait_for(rounds.get(), 60)
    assert view(s).state is EngineState.UP
    assert len(s.host.cpu_percent) >= 1 and all(0 <= p <= 100 for p in s.host.cpu_percent)
    assert s.host.numa_nodes and sum(len(n.cpus) for n in s.host.numa_nodes) >= 1
    assert s.host.mem_total > 0


async def test_startup_check_measures_decode_speed_and_reports_dead_engines(sim_engine: Any) -> None:
    gpu = sim_engine("tiny", dialect="vllm-v1", name="g", speed=1.0)
    cpu = sim_engine("tiny", dialect="llamacpp", name="c", speed=1.0)
    dead = EngineSpec("cpu9", "cpu", f"http://127.0.0.1:{free_port()}", "vllm-v1", "recompute")
    specs = [spec(gpu, "vllm-v1", "gpu0"), spec(cpu, "llamacpp", "cpu0", "cpu"), dead]
    report = await startup_check(specs, ModelParams(test_tokens=20), timeout=30)
    g, c, d = report.probe("gpu0"), report.probe("cpu0"), report.probe("cpu9")
    assert g is not None and c is not None and d is not None
    assert g.ok and c.ok, (g, c)
    assert g.models == ("ds-32b",)  # g.ok and c.ok: their /metrics answered and parsed
    assert g.generated_tokens == 20 and g.decode_tps is not None and g.decode_tps > 0
    assert c.decode_tps is not None and c.ttft is not None
    assert report.gpu_cpu_ratio == pytest.approx(g.decode_tps / c.decode_tps)
    assert not d.ok and d.models_error is not None and d.decode_tps is None


async def test_startup_check_is_bounded_by_its_timeout(sim_engine: Any) -> None:
    slow = sim_engine("tiny", dialect="vllm-v1", faults={"added_latency": 30})
    report = await startup_check([spec(slow, "vllm-v1", "gpu0")], ModelParams(), timeout=1.5)
    (probe,) = report.engines
    assert not probe.ok and "timed out after 1.5s" in (probe.generation_error or "")
    skipped = await startup_check([spec(slow, "vllm-v1", "gpu0")], ModelParams(), generate=False, timeout=60)
    assert skipped.engines[0].ok and skipped.engines[0].decode_tps is None
