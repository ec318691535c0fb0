"""llama-server's /metrics and /slots and what a client disconnect does, held against the
simulator's llama dialect (the monitor reads both the same way), and what syshaxd does
about a client that leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.llama._util import (
    GREEDY,
    NO_EOS,
    predicted_total,
    scrape,
    slots,
    wait_all_idle,
    wait_processing,
)
from tests.plugins.llama import LlamaFactory
from tests.plugins.llama_stack import LlamaStackFactory
from tests.plugins.llama_targets import ENGINES, LLAMA_SERVER, SIM_SPEED, SIMULATOR, Target, run_on

# Counters, slots and disconnects are read from engines no other test has touched.
pytestmark = [pytest.mark.llama, pytest.mark.fresh_target]

CHAT = {"messages": [{"role": "user", "content": "Say something long."}]}


@pytest.fixture
async def http(target: Target) -> AsyncIterator[httpx.AsyncClient]:
    """A raw httpx client of the target's one engine."""
    async with target.http(target.engine, timeout=30) as client:
        yield client


@run_on(*ENGINES)
async def test_metrics_parse_and_have_no_kv_cache_usage(http: httpx.AsyncClient) -> None:
    resp = await http.get("/metrics")
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = await scrape(http)
    assert all(name.startswith("llamacpp:") for name in samples)
    for name in (
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_total",
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
    ):
        assert name in samples
    assert not any("kv_cache" in name for name in samples)


@run_on(*ENGINES)
async def test_counters_move_by_the_request_usage(http: httpx.AsyncClient) -> None:
    before = await scrape(http)
    data = (
        await http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 7, **NO_EOS})
    ).json()
    after = await scrape(http)
    delta = {k: after[k] - before[k] for k in before}
    assert delta["llamacpp:tokens_predicted_total"] == 7
    # prompt_tokens_total excludes cached tokens: it matches timings.prompt_n, not usage.
    assert delta["llamacpp:prompt_tokens_total"] == data["timings"]["prompt_n"]
    assert delta["llamacpp:prompt_tokens_cached_total"] == data["timings"]["cache_n"]
    assert delta["llamacpp:n_decode_total"] >= 7
    assert after["llamacpp:n_tokens_max_total"] >= data["usage"]["total_tokens"] - 1


@run_on(*ENGINES)
async def test_throughput_gauges_reset_on_every_scrape(http: httpx.AsyncClient) -> None:
    await scrape(http)
    await http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 20, **NO_EOS})
    first = await scrape(http)
    second = await scrape(http)
    assert first["llamacpp:predicted_tokens_seconds"] > 0
    assert second["llamacpp:predicted_tokens_seconds"] == 0
    assert second["llamacpp:tokens_predicted_total"] == first["llamacpp:tokens_predicted_total"]


@run_on(*ENGINES)
async def test_slots_shape_idle_and_after_a_request(
    http: httpx.AsyncClient, target: Target
) -> None:
    fresh = await slots(http)
    assert [s["id"] for s in fresh] == list(range(target.n_parallel))
    per_slot = target.n_ctx // target.n_parallel
    for s in fresh:
        assert s["n_ctx"] == per_slot
        assert s["is_processing"] is False
        # A slot that never ran a task has no task fields at all.
        assert "id_task" not in s and "n_prompt_tokens" not in s

    body = {"prompt": "hello there", "max_tokens": 5, "id_slot": 2, **GREEDY, **NO_EOS}
    data = (await http.post("/v1/completions", json=body)).json()
    used = (await slots(http))[2]
    assert used["is_processing"] is False
    # The per-request counters are reset when the slot is released: read them while busy.
    assert used["next_token"][0]["n_decoded"] == 0
    assert used["n_prompt_tokens_processed"] == 0
    # n_prompt_tokens is the slot's cached sequence (prompt + generated - 1), not the prompt.
    assert used["n_prompt_tokens"] == data["usage"]["total_tokens"] - 1


@run_on(*ENGINES)
async def test_a_released_slot_keeps_its_last_tasks_params(http: httpx.AsyncClient) -> None:
    body = {"prompt": "hello there", "max_tokens": 5, "id_slot": 1, **GREEDY, **NO_EOS}
    assert (await http.post("/v1/completions", json=body)).status_code == 200
    used = (await slots(http))[1]
    assert used["is_processing"] is False
    assert used["params"]["n_predict"] == 5


@run_on(*ENGINES)
async def test_requests_beyond_the_slots_are_deferred(
    http: httpx.AsyncClient, target: Target
) -> None:
    n = target.n_parallel + 1
    body = {**CHAT, "max_tokens": 1000, "stream": True, **NO_EOS}

    async def run() -> None:
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            async for _ in resp.aiter_lines():
                pass

    tasks = [asyncio.create_task(run()) for _ in range(n)]
    try:
        seen = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(t.done() for t in tasks):
            m = await scrape(http)
            if m["llamacpp:requests_deferred"] >= 1:
                seen = m
                break
            await asyncio.sleep(0.01)
        assert seen is not None, "never saw a deferred request"
        assert seen["llamacpp:requests_processing"] == target.n_parallel
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await wait_all_idle(http)


@run_on(*ENGINES)
async def test_client_disconnect_frees_the_slot_and_stops_generation(
    http: httpx.AsyncClient,
) -> None:
    before = await scrape(http)
    body = {**CHAT, "max_tokens": 1000, "stream": True, **NO_EOS}
    async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
        seen = 0
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                seen += 1
                if seen == 1:
                    busy = [s for s in await slots(http) if s["is_processing"]]
                    assert len(busy) == 1
                if seen == 5:
                    break
    # Leaving the block closed the connection mid-stream.
    await wait_all_idle(http)
    after = await scrape(http)
    generated = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert 4 <= generated < 1000


@run_on(*ENGINES)
async def test_the_generated_token_counter_moves_only_when_a_request_ends(http: httpx.AsyncClient) -> None:
    # Why a decode rate from counter deltas reads 0 while llama-server generates: it adds a
    # request's tokens to llamacpp:tokens_predicted_total when the slot is released. /slots
    # has the live count (next_token[0].n_decoded) while the slot is processing. The
    # monitor rates their sum, so sim-backed monitor tests need the simulator to agree.
    before = (await scrape(http))["llamacpp:tokens_predicted_total"]
    body = {"prompt": "Count with me", "max_tokens": 3000, "stream": True, **NO_EOS}
    async with http.stream("POST", "/v1/completions", json=body) as resp:
        chunks = 0
        async for line in resp.aiter_lines():
            chunks += line.startswith("data: {")
            if chunks == 50:
                # Measured inside the loop: leaving it lets the line iterator be
                # finalized, which closes the response and cancels the request.
                during = (await scrape(http))["llamacpp:tokens_predicted_total"]
                busy = [s for s in await slots(http) if s["is_processing"]]
                break
    await wait_all_idle(http)
    after = (await scrape(http))["llamacpp:tokens_predicted_total"]
    assert busy and busy[0]["next_token"][0]["n_decoded"] >= 50, busy
    assert during == before
    assert after - before >= 50  # counted once the request ended (here: cancelled)


@dataclass(frozen=True)
class _Pair:
    """syshaxd in front of a GPU-role and a CPU-role server."""

    url: str
    servers: tuple[str, str]
    slot_n_ctx: int
    model: str


@pytest.fixture(params=[LLAMA_SERVER, SIMULATOR])
def served_pair(request: pytest.FixtureRequest, tmp_path: Path) -> _Pair:
    """Real llama-servers behind syshaxd, or the simulator's llama dialect behind syshaxd."""
    if request.param == LLAMA_SERVER:
        stacks: LlamaStackFactory = request.getfixturevalue("llama_stack")
        real = stacks()
        return _Pair(real.url, (real.gpu.url, real.cpu.url), real.gpu.n_ctx // real.gpu.n_parallel, "tiny")
    make_stack: Callable[..., Any] = request.getfixturevalue("make_stack")
    sim = make_stack(dialect="llamacpp", speed=SIM_SPEED)
    n_ctx = httpx.get(f"{sim.cpu_url}/props", timeout=10).json()["default_generation_settings"]["n_ctx"]
    return _Pair(sim.url, (sim.gpu_url, sim.cpu_url), n_ctx, "ds-32b")


async def _abandon(url: str, body: dict[str, Any], servers: tuple[str, ...]) -> float:
    """Tokens the servers generate for a non-streamed request whose client leaves once it runs.

    The /slots polling of ``wait_processing`` goes on until every slot is idle again.
    """
    await wait_processing(servers, busy=False)
    before = await predicted_total(servers)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        request = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        await wait_processing(servers, busy=True)
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request
    await wait_processing(servers, busy=False)
    return await predicted_total(servers) - before


async def test_an_abandoned_non_streamed_request_runs_on_at_the_server_but_not_through_syshaxd(
    served_pair: _Pair,
) -> None:
    # llama-server checks a non-streaming client's socket only after a full second with
    # no result on its shared result queue; every /slots or /metrics answer (and every
    # token of any other request) resets that wait. So under a monitor polling faster
    # than 1 Hz an abandoned non-streamed request is never cancelled (first half). The
    # conductor therefore streams from llama-server and assembles the answer itself:
    # through syshaxd the same request stops when its client leaves (second half). The
    # simulator's llama dialect does the same, so sim-backed tests catch a conductor that
    # goes back to non-streamed requests.
    pair = served_pair
    limit = pair.slot_n_ctx - 100
    body = {"model": pair.model, **CHAT, "max_tokens": limit, **NO_EOS}
    assert await _abandon(pair.servers[0], body, pair.servers) == limit
    assert await _abandon(pair.url, body, pair.servers) < limit


@pytest.fixture(params=[LLAMA_SERVER, SIMULATOR])
def one_slot(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """``(url, tokens per slot)`` of an engine with one slot: an answer to its end takes seconds."""
    if request.param == LLAMA_SERVER:
        factory: LlamaFactory = request.getfixturevalue("llama_factory")
        server = factory(n_parallel=1, n_ctx=4096)
        yield server.url, 4096
        return
    from sim.launch import start_engine

    # tiny is trained for 2048 tokens; at speed 5 the whole slot takes about 4 s
    with start_engine("tiny", dialect="llamacpp", speed=5.0, parallel=1, ctx_size=2048) as (_, engine):
        yield engine.url, 2048


async def test_an_abandoned_non_streamed_request_is_cancelled_only_after_a_quiet_second(
    one_slot: tuple[str, int],
) -> None:
    url, slot_tokens = one_slot
    servers = (url,)
    # Polled every 20 ms, an abandoned request runs to its end.
    body = {**CHAT, "max_tokens": 1000, **NO_EOS}
    assert await _abandon(url, body, servers) == 1000
    # Left alone it is still running half a second later; a quiet second after the last
    # /slots answer it is cancelled, long before the slot's context is full.
    before = await predicted_total(servers)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        request = asyncio.create_task(client.post("/v1/chat/completions", json={**CHAT, **NO_EOS}))
        await wait_processing(servers, busy=True)
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request
        await asyncio.sleep(0.5)  # well inside the quiet second
        assert (await slots(client))[0]["is_processing"]
        # Each look is an answer that restarts the quiet second: look less often than that.
        for _ in range(40):
            await asyncio.sleep(1.5)
            if not (await slots(client))[0]["is_processing"]:
                break
        assert not (await slots(client))[0]["is_processing"]
    assert await predicted_total(servers) - before < slot_tokens - 100
