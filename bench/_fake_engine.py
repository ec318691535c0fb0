"""A fake vLLM engine for the overhead benchmark: exact, cheap timing and nothing else.

The simulator models an engine's compute; this one models none. A streamed answer's first
chunk leaves ``--ttft`` seconds after the request arrived and one chunk follows every
``--interval`` seconds until ``max_tokens``; a non-streamed answer leaves after the same total
time. Sockets have ``TCP_NODELAY`` (as vLLM's uvicorn has), so small writes are not held for
the client's delayed ACK. It records the time from each request's arrival to its first byte
written, so the benchmark can check that the direct path shows the engine's own TTFT.

    python bench/_fake_engine.py --port 8001 --ttft 0.01 --interval 0.01
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import time
from typing import Any, cast

import httptools
import uvloop

MODEL = "ds-32b"
_HEADERS_SSE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _json(status: int, body: Any, extra: bytes = b"") -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}.get(status, b"OK")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
            % (status, reason, len(data), extra)) + data


class Engine:
    """The engine's settings and its records."""

    def __init__(self, ttft: float, interval: float) -> None:
        self.ttft = ttft
        self.interval = interval
        self.first_byte_delays: list[float] = []  # arrival -> first byte written, per request
        self.requests = 0
        self.received_ids: list[str] = []  # X-Request-Id headers, when sent

    def metrics(self) -> bytes:
        text = (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
                f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
                f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.0\n"
                f"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total {self.requests}\n")
        data = text.encode()
        return b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n" % len(data) + data


class Connection(asyncio.Protocol):
    """One client connection: requests in order, each answered on a timer."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.headers: dict[bytes, bytes] = {}
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        arrived = time.perf_counter()
        method = self.parser.get_method()
        url, body, headers = self.url, b"".join(self.body), self.headers
        self.url, self.body, self.headers = b"", [], {}
        if self.transport is None:
            return
        if method == b"GET":
            self._get(url)
            return
        if url not in (b"/v1/chat/completions", b"/v1/completions"):
            self.transport.write(_json(404, {"error": {"message": "not found", "type": "NotFoundError", "code": 404}}))
            return
        try:
            request = json.loads(body)
        except ValueError:
            self.transport.write(_json(400, {"error": {"message": "bad JSON", "type": "BadRequestError", "code": 400}}))
            return
        self.engine.requests += 1
        if b"x-request-id" in headers:
            self.engine.received_ids.append(headers[b"x-request-id"].decode())
        tokens = max(1, int(request.get("max_tokens") or 16))
        chat = url == b"/v1/chat/completions"
        echo = b"x-request-id: %s\r\n" % headers[b"x-request-id"] if b"x-request-id" in headers else b""
        if request.get("stream"):
            self._stream(arrived, tokens, chat, echo)
        else:
            delay = self.engine.ttft + self.engine.interval * (tokens - 1)
            self.timer = asyncio.get_running_loop().call_later(delay, self._whole, arrived, tokens, chat, echo)

    def _get(self, url: bytes) -> None:
        assert self.transport is not None
        if url == b"/metrics":
            self.transport.write(self.engine.metrics())
        elif url == b"/v1/models":
            self.transport.write(_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}))
        elif url == b"/stats":
            self.transport.write(_json(200, {"first_byte_delays": self.engine.first_byte_delays,
                                             "requests": self.engine.requests,
                                             "received_ids": self.engine.received_ids[-100:]}))
        else:
            self.transport.write(_json(200, {"status": "ok"}))

    def _whole(self, arrived: float, tokens: int, chat: bool, echo: bytes) -> None:
        if self.transport is None:
            return
        text = " tok" * tokens
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"} if chat else
                                  {"index": 0, "text": text, "finish_reason": "length"})
        body = {"id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion", "created": 0,
                "model": MODEL, "choices": [choice],
                "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}}
        self.engine.first_byte_delays.append(time.perf_counter() - arrived)
        self.transport.write(_json(200, body, echo))

    def _stream(self, arrived: float, tokens: int, chat: bool, echo: bytes) -> None:
        loop = asyncio.get_running_loop()
        head = _HEADERS_SSE if not echo else _HEADERS_SSE[:-2] + echo + b"\r\n"
        kind = b"chat.completion.chunk" if chat else b"text_completion"
        piece = b'"delta":{"content":" tok"}' if chat else b'"text":" tok"'
        event = (b'data: {"id":"cmpl-fake","object":"' + kind + b'","created":0,"model":"' + MODEL.encode()
                 + b'","choices":[{"index":0,' + piece + b',"finish_reason":null}]}\n\n')
        state = {"sent": 0}

        def tick() -> None:
            if self.transport is None:
                return
            out = b""
            if state["sent"] == 0:
                out = head
                self.engine.first_byte_delays.append(time.perf_counter() - arrived)
            out += _chunk(event)
            state["sent"] += 1
            if state["sent"] >= tokens:
                out += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
                self.transport.write(out)
                self.timer = None
                return
            self.transport.write(out)
            self.timer = loop.call_later(self.engine.interval, tick)

        self.timer = loop.call_later(self.engine.ttft, tick)


async def serve(port: int, ttft: float, interval: float) -> None:
    loop = asyncio.get_running_loop()
    engine = Engine(ttft, interval)
    server = await loop.create_server(lambda: Connection(engine), "127.0.0.1", port, backlog=4096)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft", type=float, default=0.01, help="seconds to the first chunk (default 0.01)")
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between chunks (default 0.01)")
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.ttft, args.interval))


if __name__ == "__main__":
    main()
