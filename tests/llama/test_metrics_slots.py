"""The real llama-server's /metrics and /slots, and what a client disconnect does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.llama._util import GREEDY, NO_EOS, scrape, slots, wait_all_idle
from tests.plugins.llama import LlamaServer

pytestmark = pytest.mark.llama

CHAT = {"messages": [{"role": "user", "content": "Say something long."}]}


@pytest.fixture
async def http(llama_server: LlamaServer) -> AsyncIterator[httpx.AsyncClient]:
    """A raw httpx client."""
    async with httpx.AsyncClient(base_url=llama_server.url, timeout=30) as client:
        yield client


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


async def test_throughput_gauges_reset_on_every_scrape(http: httpx.AsyncClient) -> None:
    await scrape(http)
    await http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 20, **NO_EOS})
    first = await scrape(http)
    second = await scrape(http)
    assert first["llamacpp:predicted_tokens_seconds"] > 0
    assert second["llamacpp:predicted_tokens_seconds"] == 0
    assert second["llamacpp:tokens_predicted_total"] == first["llamacpp:tokens_predicted_total"]


async def test_slots_shape_idle_and_after_a_request(
    http: httpx.AsyncClient, llama_server: LlamaServer
) -> None:
    fresh = await slots(http)
    assert [s["id"] for s in fresh] == list(range(llama_server.n_parallel))
    per_slot = llama_server.n_ctx // llama_server.n_parallel
    for s in fresh:
        assert s["n_ctx"] == per_slot
        assert s["is_processing"] is False
        # A slot that never ran a task has no task fields at all.
        assert "id_task" not in s and "n_prompt_tokens" not in s

    body = {"prompt": "hello there", "max_tokens": 5, "id_slot": 2, **GREEDY, **NO_EOS}
    data = (await http.post("/v1/completions", json=body)).json()
    used = (await slots(http))[2]
    assert used["is_processing"] is False
    assert used["params"]["n_predict"] == 5
    # The per-request counters are reset when the slot is released: read them while busy.
    assert used["next_token"][0]["n_decoded"] == 0
    assert used["n_prompt_tokens_processed"] == 0
    # n_prompt_tokens is the slot's cached sequence (prompt + generated - 1), not the prompt.
    assert used["n_prompt_tokens"] == data["usage"]["total_tokens"] - 1


async def test_requests_beyond_the_slots_are_deferred(
    http: httpx.AsyncClient, llama_server: LlamaServer
) -> None:
    n = llama_server.n_parallel + 1
    body = {**CHAT, "max_tokens": 1000, "stream": True, **NO_EOS}

    async def run() -> None:
        async with http.stream("POST", "/v1/chat/completions", json=body) as resp:
            async for _ in resp.aiter_lines():
                pass

    tasks = [asyncio.create_task(run()) for _ in range(n)]
    try:
        seen = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(t.done() for t in tasks):
            m = await scrape(http)
            if m["llamacpp:requests_deferred"] >= 1:
                seen = m
                break
            await asyncio.sleep(0.01)
        assert seen is not None, "never saw a deferred request"
        assert seen["llamacpp:requests_processing"] == llama_server.n_parallel
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await wait_all_idle(http)


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


async def test_abandoned_non_streaming_request_runs_on_while_the_server_is_polled(
    http: httpx.AsyncClient, llama_server: LlamaServer
) -> None:
    # llama-server checks a non-streaming client's socket only after a full second with
    # no result on its shared result queue; every /slots or /metrics answer (and every
    # token of any other request) resets that wait. So under a monitor polling faster
    # than 1 Hz an abandoned non-streaming request is never cancelled.
    before = await scrape(http)
    limit = llama_server.n_ctx // llama_server.n_parallel - 100
    body = {**CHAT, "max_tokens": limit, **NO_EOS}
    async with httpx.AsyncClient(base_url=llama_server.url, timeout=0.2) as impatient:
        with pytest.raises(httpx.TimeoutException):
            await impatient.post("/v1/chat/completions", json=body)
    await wait_all_idle(http)
    after = await scrape(http)
    generated = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert generated == limit
