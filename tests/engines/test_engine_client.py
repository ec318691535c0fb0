"""The engine client and its keep-alive pool, against a real simulated engine."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable

import psutil
import pytest

from syshaxd.config import EngineSpec
from syshaxd.engines import EngineClient, EngineFailure, EngineRejected
from tests.plugins.ports import free_port
from tests.plugins.sim import SimEngineFactory


def body(max_tokens: int = 8, stream: bool = True) -> bytes:
    return json.dumps({"model": "ds-32b", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": max_tokens, "stream": stream, "ignore_eos": True}).encode()


def client_for(url: str, *, max_idle: int = 512, keepalive_expiry: float = 600.0) -> EngineClient:
    """A client whose idle connections outlive the test unless ``keepalive_expiry`` says otherwise
    (the daemon's 4 s would let a slow machine's pause between requests open a new one)."""
    client = EngineClient(EngineSpec("gpu0", "gpu", url, "vllm-v1", "recompute"))
    client.pool.max_idle = max_idle
    client.pool.keepalive_expiry = keepalive_expiry
    return client


async def stream_text(client: EngineClient, max_tokens: int = 8) -> bytes:
    response = await client.open_stream("/v1/chat/completions", body(max_tokens))
    try:
        return await response.aread()
    finally:
        response.close()


@pytest.fixture
async def engine(sim_engine: SimEngineFactory) -> AsyncIterator[str]:
    yield sim_engine("tiny").url


def established_to(url: str) -> int:
    port = int(url.rsplit(":", 1)[1])
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


async def eventually(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Let the loop run (a transport closes its socket on a later turn) until ``check`` holds;
    its last value after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for _ in itertools.count():  # the OS's sockets: there is no event to wait on
        if check() or loop.time() > deadline:
            break
        await asyncio.sleep(0.01)
    return check()


async def test_sequential_streams_reuse_one_connection(engine: str) -> None:
    client = client_for(engine)
    answers = [await stream_text(client) for _ in range(5)]
    plain, _ = await client.post_json("/v1/chat/completions", body(stream=False))
    assert client.pool.opened == 1 and client.pool.idle == 1 and client.pool.busy == 0
    assert all(a.rstrip().endswith(b"data: [DONE]") for a in answers)
    assert plain["choices"][0]["message"]["content"]
    await client.aclose()
    assert client.pool.idle == 0


async def test_every_engine_connection_has_tcp_nodelay(engine: str) -> None:
    # A small write must not wait for the engine's delayed ACK (a 40 ms stall per request).
    client = client_for(engine)
    await stream_text(client)
    (conn,) = list(client.pool._idle)
    assert conn.transport is not None
    sock = conn.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    await client.aclose()


async def test_concurrent_streams_open_one_connection_each_and_keep_at_most_max_idle(engine: str) -> None:
    client = client_for(engine, max_idle=3)
    await asyncio.gather(*(stream_text(client, 16) for _ in range(6)))
    assert client.pool.opened == 6 and client.pool.idle == 3 and client.pool.busy == 0
    await asyncio.gather(*(stream_text(client, 4) for _ in range(3)))
    assert client.pool.opened == 6  # the three kept were reused
    await client.aclose()


async def test_a_stream_closed_early_is_not_reused_and_the_engine_stops_it(
    engine: str, sim_engine: SimEngineFactory
) -> None:
    client = client_for(engine)
    response = await client.open_stream("/v1/chat/completions", body(2000))
    async for _ in response.aiter_bytes():
        break
    response.close()
    await asyncio.sleep(0)
    assert client.pool.idle == 0 and client.pool.busy == 0
    async def idle() -> bool:
        return (await client.get_json("/sim/stats", timeout=60))["running"] == 0

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    for _ in itertools.count():  # the engine's state: polled, as the monitor does
        if await idle() or loop.time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert await idle()
    await client.aclose()


async def test_an_expired_connection_is_replaced_and_closed(engine: str) -> None:
    client = client_for(engine, keepalive_expiry=0.2)
    await stream_text(client)
    await asyncio.sleep(0.4)  # past the expiry (a busy machine only sleeps longer)
    await stream_text(client)
    assert client.pool.opened == 2 and client.pool.idle == 1
    assert await eventually(lambda: established_to(engine) == 1)
    await client.aclose()


async def test_an_engine_restart_under_idle_connections_costs_no_request(sim_engine: SimEngineFactory) -> None:
    port = free_port()
    first = sim_engine("tiny", port=port)
    client = client_for(first.url)
    await asyncio.gather(*(stream_text(client) for _ in range(3)))
    assert client.pool.idle == 3
    sim_engine.process(first).stop()
    sim_engine("tiny", port=port)
    # The idle connections were closed by the old engine: each is noticed and dropped (or the
    # request goes again on a new connection), and the request is answered.
    assert (await stream_text(client)).rstrip().endswith(b"data: [DONE]")
    assert client.pool.idle == 1
    await client.aclose()


async def test_refused_and_dead_engines_are_engine_failures(sim_engine: SimEngineFactory) -> None:
    refused = client_for(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(EngineFailure, match="refused"):
        await refused.post_json("/v1/chat/completions", body(stream=False))
    await refused.aclose()
    engine = sim_engine("tiny")
    client = client_for(engine.url)
    response = await client.open_stream("/v1/chat/completions", body(2000))
    chunks = response.aiter_bytes()
    await chunks.__anext__()
    os.kill(sim_engine.process(engine).pid, signal.SIGKILL)
    with pytest.raises(EngineFailure, match="closed by the engine"):
        async for _ in chunks:
            pass
    await asyncio.sleep(0)
    assert client.pool.busy == 0 and client.pool.idle == 0
    await client.aclose()


async def test_a_4xx_is_the_clients_problem_and_a_5xx_the_engines(engine: str, sim_engine: SimEngineFactory) -> None:
    client = client_for(engine)
    with pytest.raises(EngineRejected) as rejected:
        await client.post_json("/v1/chat/completions", b'{"messages": "not a list"}')
    assert 400 <= rejected.value.status < 500
    broken = client_for(sim_engine("tiny", faults={"error_rate": 1.0}).url)
    with pytest.raises(EngineFailure) as failed:
        await broken.post_json("/v1/chat/completions", body(stream=False))
    assert failed.value.status >= 500
    await client.aclose()
    await broken.aclose()


async def test_requests_cancelled_at_any_step_leave_no_connection_behind(engine: str) -> None:
    # A client that leaves (or a deadline) cancels the request wherever it is. Every socket still
    # open must be one the pool knows about; an orphan would stay open until the engine gave up.
    client = client_for(engine)
    await stream_text(client)
    for steps in range(1, 16):
        task = asyncio.create_task(client.post_json("/v1/chat/completions", body(stream=False)))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, EngineFailure):
            await task
    await stream_text(client)
    assert await eventually(lambda: established_to(engine) == client.pool.idle + client.pool.busy)
    assert client.pool.busy == 0
    await client.aclose()
    assert await eventually(lambda: established_to(engine) == 0)


async def test_closing_the_pool_while_requests_start_leaves_no_connection_open(engine: str) -> None:
    for steps in range(1, 12):
        client = client_for(engine)
        await stream_text(client)
        task = asyncio.create_task(client.post_json("/v1/chat/completions", body(stream=False)))
        for _ in range(steps):
            await asyncio.sleep(0)
        await client.aclose()
        with contextlib.suppress(EngineFailure):
            await task
        assert await eventually(lambda: established_to(engine) == 0), f"after {steps} steps"
        assert client.pool.opened == 1, f"a connection was opened after the pool closed ({steps} steps)"


def test_only_plain_http_is_spoken() -> None:
    with pytest.raises(ValueError, match="plain http"):
        client_for("https://127.0.0.1:1")


async def test_closing_the_pool_ends_a_busy_stream_with_an_error(engine: str) -> None:
    client = client_for(engine)
    response = await client.open_stream("/v1/chat/completions", body(2000))
    chunks = response.aiter_bytes()
    first = await chunks.__anext__()
    assert json.loads(first.split(b"data: ", 1)[1].split(b"\n", 1)[0])["object"] == "chat.completion.chunk"
    await client.aclose()
    with pytest.raises(EngineFailure):
        async for _ in chunks:
            pass
    assert client.pool.busy == 0 and client.pool.idle == 0
    with pytest.raises(EngineFailure, match="closed"):
        await client.post_json("/v1/chat/completions", body(stream=False))
