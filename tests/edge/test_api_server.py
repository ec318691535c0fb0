"""The API port's own HTTP/1.1 server, in-process on a real loopback socket."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable

import pytest

from syshaxd.api.guard import Guard
from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.api.server import ApiServer
from syshaxd.service.servers import bind_tcp


def echo(request: Request, response: Response) -> Awaitable[None] | None:
    """Answers at once with the request's path and body."""
    body = request.path.encode() + b" " + request.body
    response.start(200, [(b"content-type", b"text/plain")], len(body))
    response.write(body)
    response.end()
    return None


async def streamed(request: Request, response: Response) -> None:
    """Three chunks of unknown length, a pause between each."""
    response.start(200, [(b"content-type", b"text/event-stream")])
    for i in range(3):
        response.write(b"data: %d\n\n" % i)
        await asyncio.sleep(0.01)
    response.end()


def missing(request: Request, response: Response) -> None:
    """What no route answers: a 404 naming the path."""
    body = b"no route " + request.path.encode()
    response.start(404, [(b"content-type", b"text/plain")], len(body))
    response.write(body)
    response.end()


@pytest.fixture
async def server() -> AsyncIterator[tuple[ApiServer, int]]:
    sock = bind_tcp("127.0.0.1", 0)
    api = ApiServer({"/echo": echo, "/stream": streamed}, Guard(None), max_body=1024, default=missing)
    await api.start(sock)
    try:
        yield api, sock.getsockname()[1]
    finally:
        await api.stop(1.0)


async def exchange(port: int, data: bytes, *, until: bytes = b"", close: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    if close:
        writer.write_eof()
    out = b""
    try:
        while not (until and until in out):
            chunk = await asyncio.wait_for(reader.read(65536), 60)
            if not chunk:
                break
            out += chunk
    finally:
        writer.close()
    return out


async def test_accepted_sockets_have_tcp_nodelay(server: tuple[ApiServer, int]) -> None:
    # Without it, a small write on a kept-alive connection waits for the client's delayed ACK
    # (about 40 ms per request, the stall issue #21 found in the simulator's raw sockets).
    # asyncio and uvloop both set it on the transports they make; the server sets it too, and
    # this pins the result whichever of them a later change of loop or transport relies on.
    api, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")
        await reader.readuntil(b"/echo ")
        (conn,) = api.connections
        assert conn.transport is not None
        sock = conn.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        writer.close()


async def test_keep_alive_and_pipelined_requests_are_answered_in_order(server: tuple[ApiServer, int]) -> None:
    _, port = server
    requests = b"".join(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n%d" % i for i in range(3))
    out = await exchange(port, requests, until=b"/echo 2")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b"/echo 0") < out.index(b"/echo 1") < out.index(b"/echo 2")


async def test_a_path_no_route_serves_goes_to_the_default(server: tuple[ApiServer, int]) -> None:
    _, port = server
    out = await exchange(port, b"GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n", until=b"no route /nowhere")
    assert out.startswith(b"HTTP/1.1 404 ")


async def test_a_stream_is_chunked_for_http_1_1_and_closed_for_http_1_0(server: tuple[ApiServer, int]) -> None:
    _, port = server
    chunked = await exchange(port, b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n", until=b"0\r\n\r\n")
    assert b"transfer-encoding: chunked" in chunked and chunked.endswith(b"0\r\n\r\n")
    old = await exchange(port, b"GET /stream HTTP/1.0\r\n\r\n")  # ends when the server closes
    # The status line is HTTP/1.1 whatever the client spoke (RFC 9110 6.2); the framing is 1.0's.
    assert old.startswith(b"HTTP/1.1 200") and b"connection: close" in old and old.endswith(b"data: 2\n\n")


async def test_limits_and_bad_requests_get_clear_answers(server: tuple[ApiServer, int]) -> None:
    _, port = server
    big = await exchange(port, b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000)
    assert b" 413 " in big.split(b"\r\n", 1)[0] and b"max_body_bytes" in big
    head = b"GET /echo HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * 70_000 + b"\r\n\r\n"
    assert b" 431 " in (await exchange(port, head)).split(b"\r\n", 1)[0]
    garbage = await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
    assert b" 400 " in garbage.split(b"\r\n", 1)[0]
    # A body sent along with the head needs no 100 Continue (RFC 9110 10.1.1 lets the server omit it).
    eager = await exchange(port, b"POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\nok",
                           until=b"/echo ok")
    assert eager.startswith(b"HTTP/1.1 200 OK")


async def test_a_client_that_waits_for_100_continue_gets_it_then_its_answer(server: tuple[ApiServer, int]) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        assert (await asyncio.wait_for(reader.readuntil(b"/echo ok"), 5)).startswith(b"HTTP/1.1 200 OK")
    finally:
        writer.close()


async def test_a_stop_closes_idle_connections_and_lets_a_stream_finish(server: tuple[ApiServer, int]) -> None:
    api, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
    await reader.readuntil(b"data: 0")
    stopping = asyncio.create_task(api.stop(5.0))
    rest = await asyncio.wait_for(reader.read(), 60)  # the stream ends, then the connection
    assert rest.endswith(b"0\r\n\r\n")
    await stopping
    assert not api.connections
    writer.close()
