"""EngineTransport: syshaxd's keep-alive pool for the engine hop, against a real simulated engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator

import httpx
import psutil
import pytest

from syshaxd.engines.pool import EngineTransport
from tests.plugins.ports import free_port
from tests.plugins.sim import SimEngineFactory


def body(max_tokens: int = 8, stream: bool = True) -> dict[str, object]:
    return {"model": "ds-32b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
            "stream": stream, "ignore_eos": True}


async def client_for(url: str, **kwargs: float) -> tuple[httpx.AsyncClient, EngineTransport]:
    transport = EngineTransport(**kwargs)  # type: ignore[arg-type]
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=30), transport


async def stream_text(client: httpx.AsyncClient, max_tokens: int = 8) -> str:
    async with client.stream("POST", "/v1/chat/completions", json=body(max_tokens)) as response:
        assert response.status_code == 200
        return "".join([part async for part in response.aiter_text()])


@pytest.fixture
async def engine(sim_engine: SimEngineFactory) -> AsyncIterator[str]:
    yield sim_engine("tiny").url


async def test_sequential_streams_reuse_one_connection(engine: str) -> None:
    client, pool = await client_for(engine)
    async with client:
        answers = [await stream_text(client) for _ in range(5)]
        plain = (await client.post("/v1/chat/completions", json=body(stream=False))).json()
        assert pool.opened == 1 and pool.idle == 1 and pool.busy == 0
    assert all(a.rstrip().endswith("data: [DONE]") for a in answers)
    assert plain["choices"][0]["message"]["content"]
    assert pool.idle == 0  # closing the client closed the pool


async def test_concurrent_streams_open_one_connection_each_and_keep_at_most_max_idle(engine: str) -> None:
    client, pool = await client_for(engine, max_idle=3)
    async with client:
        await asyncio.gather(*(stream_text(client, 16) for _ in range(6)))
        assert pool.opened == 6 and pool.idle == 3 and pool.busy == 0
        await asyncio.gather(*(stream_text(client, 4) for _ in range(3)))
        assert pool.opened == 6  # the three kept were reused


async def test_a_stream_closed_early_is_not_reused_and_the_engine_stops_it(engine: str, sim_engine: SimEngineFactory) -> None:
    client, pool = await client_for(engine)
    async with client:
        async with client.stream("POST", "/v1/chat/completions", json=body(2000)) as response:
            async for _ in response.aiter_bytes():
                break
        assert pool.idle == 0 and pool.busy == 0
        for _ in range(100):
            stats = (await client.get("/sim/stats")).json()
            if stats["running"] == 0:
                break
            await asyncio.sleep(0.05)
        assert stats["running"] == 0
        assert pool.opened == 2  # the cut connection was closed, /sim/stats needed a new one


async def test_an_expired_connection_is_replaced_and_closed(engine: str) -> None:
    client, pool = await client_for(engine, keepalive_expiry=0.2)
    async with client:
        await stream_text(client)
        await asyncio.sleep(0.4)
        await stream_text(client)
        assert pool.opened == 2 and pool.idle == 1


async def test_an_engine_restart_under_idle_connections_costs_no_request(sim_engine: SimEngineFactory) -> None:
    port = free_port()
    first = sim_engine("tiny", port=port)
    client, pool = await client_for(first.url)
    async with client:
        await asyncio.gather(*(stream_text(client) for _ in range(3)))
        assert pool.idle == 3
        sim_engine.process(first).stop()
        sim_engine("tiny", port=port)
        # The three idle connections were closed by the old engine: each is noticed and dropped.
        assert (await stream_text(client)).rstrip().endswith("data: [DONE]")
        assert pool.opened == 4 and pool.idle == 1


async def test_refused_and_dead_engines_raise_httpx_errors(sim_engine: SimEngineFactory) -> None:
    client, _ = await client_for(f"http://127.0.0.1:{free_port()}")
    async with client:
        with pytest.raises(httpx.ConnectError):
            await client.post("/v1/chat/completions", json=body(stream=False))
    engine = sim_engine("tiny")
    client, pool = await client_for(engine.url)
    async with client:
        async with client.stream("POST", "/v1/chat/completions", json=body(2000)) as response:
            chunks = response.aiter_bytes()
            await chunks.__anext__()
            os.kill(sim_engine.process(engine).pid, signal.SIGKILL)
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                async for _ in chunks:
                    pass
        assert pool.busy == 0 and pool.idle == 0


def established_to(url: str) -> int:
    port = int(url.rsplit(":", 1)[1])
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


async def test_requests_cancelled_at_any_step_leave_no_connection_behind(engine: str) -> None:
    # A client that leaves (or a deadline) cancels the request wherever it is: waiting for the
    # connection's lock, sending, waiting for the answer. Every socket still open must be one
    # the pool knows about; an orphan would stay ESTABLISHED until the engine gave up on it.
    client, pool = await client_for(engine)
    async with client:
        await stream_text(client)
        for steps in range(1, 16):
            task = asyncio.create_task(client.post("/v1/chat/completions", json=body(stream=False)))
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
        await stream_text(client)
        await asyncio.sleep(0.2)  # the closes scheduled by the pool run
        assert established_to(engine) == pool.idle + pool.busy
        assert pool.busy == 0
    await asyncio.sleep(0.2)
    assert established_to(engine) == 0


async def test_closing_the_pool_while_requests_start_leaves_no_connection_open(engine: str) -> None:
    for steps in range(1, 12):
        client, pool = await client_for(engine)
        await stream_text(client)
        task = asyncio.create_task(client.post("/v1/chat/completions", json=body(stream=False)))
        for _ in range(steps):
            await asyncio.sleep(0)
        await pool.aclose()
        with contextlib.suppress(httpx.HTTPError):
            (await task).raise_for_status()
        await client.aclose()
        await asyncio.sleep(0.05)
        assert pool.opened == 1, f"a connection was opened after the pool closed ({steps} steps)"
        assert established_to(engine) == 0, f"after {steps} steps"


async def test_only_plain_http_is_spoken() -> None:
    client, pool = await client_for("https://127.0.0.1:1")
    async with client:
        with pytest.raises(httpx.UnsupportedProtocol, match="plain http"):
            await client.get("/health")
    assert pool.opened == 0


async def test_closing_the_pool_ends_a_busy_stream_with_an_error(engine: str) -> None:
    client, pool = await client_for(engine)
    async with client.stream("POST", "/v1/chat/completions", json=body(2000)) as response:
        chunks = response.aiter_bytes()
        first = await chunks.__anext__()
        assert json.loads(first.split(b"data: ", 1)[1].split(b"\n", 1)[0])["object"] == "chat.completion.chunk"
        await client.aclose()
        with pytest.raises(httpx.HTTPError):
            async for _ in chunks:
                pass
    assert pool.busy == 0 and pool.idle == 0
    with pytest.raises(RuntimeError):  # httpx refuses a closed client before the transport sees it
        await client.get("/health")
