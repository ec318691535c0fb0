"""A lean closed-loop HTTP load client for the overhead benchmark.

On a two-core machine the client shares the CPU with the engine and the proxies, so it must
cost little: one asyncio protocol per keep-alive connection, ``httptools`` parsing the
responses, no per-chunk objects. Each of ``concurrency`` connections sends its requests one
after the other. Per request it records the time to the first byte of the answer (the first
event of a stream, or the response of a non-streamed request), the end, the events seen and
whether the stream ended with ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, cast

import httptools

from syshaxd.sse import DONE


@dataclass
class Sample:
    """One request as the client saw it (seconds since it was sent)."""

    status: int = 0
    ttft: float | None = None
    e2e: float | None = None
    events: int = 0
    done: bool = False
    error: str | None = None
    request_id: str | None = None

    @property
    def ok(self) -> bool:
        """Answered 200 and, for a stream, ended with ``[DONE]``."""
        return self.status == 200 and self.error is None and self.e2e is not None


@dataclass
class _Pending:
    sample: Sample
    sent: float
    stream: bool
    future: asyncio.Future[Sample]
    tail: bytes = b""
    body: list[bytes] = field(default_factory=list)


class _Client(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.pending: _Pending | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.pending is not None and not self.pending.future.done():
            self.pending.sample.error = f"connection lost: {exc or 'closed by the server'}"
            self.pending.future.set_result(self.pending.sample)
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserError as exc:
            if self.pending is not None and not self.pending.future.done():
                self.pending.sample.error = f"bad HTTP: {exc}"
                self.pending.future.set_result(self.pending.sample)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.pending is not None and name.lower() == b"x-request-id":
            self.pending.sample.request_id = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self.pending is not None:
            self.pending.sample.status = self.parser.get_status_code()
            if not self.pending.stream:
                self.pending.sample.ttft = time.perf_counter() - self.pending.sent

    def on_body(self, body: bytes) -> None:
        pending = self.pending
        if pending is None:
            return
        if pending.stream:
            if pending.sample.ttft is None:
                pending.sample.ttft = time.perf_counter() - pending.sent
            pending.sample.events += body.count(b"data:")
            pending.tail = (pending.tail + body)[-32:]
        else:
            pending.body.append(body)

    def on_message_complete(self) -> None:
        pending, self.pending = self.pending, None
        if pending is None or pending.future.done():
            return
        sample = pending.sample
        sample.e2e = time.perf_counter() - pending.sent
        if pending.stream:
            sample.done = b"data: " + DONE in pending.tail
            if sample.status == 200 and not sample.done:
                sample.error = "stream ended without [DONE]"
            if b'"error"' in pending.tail:
                sample.error = "error event"
        pending.future.set_result(sample)

    async def request(self, path: str, body: bytes, stream: bool, headers: bytes = b"") -> Sample:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.pending = _Pending(Sample(), time.perf_counter(), stream, loop.create_future())
        self.transport.write(b"POST %s HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n%s\r\n%s" % (path.encode(), len(body), headers, body))
        return await self.pending.future


async def closed_loop(host: str, port: int, concurrency: int, total: int, body: dict[str, Any],
                      path: str = "/v1/chat/completions", timeout: float = 120.0) -> tuple[list[Sample], float]:
    """``total`` requests over ``concurrency`` keep-alive connections; the samples and the wall time."""
    loop = asyncio.get_running_loop()
    data = json.dumps(body, separators=(",", ":")).encode()
    stream = bool(body.get("stream"))
    left = [total]
    samples: list[Sample] = []

    async def worker() -> None:
        transport, client = await loop.create_connection(_Client, host, port)
        try:
            while left[0] > 0:
                left[0] -= 1
                sample = await asyncio.wait_for(client.request(path, data, stream), timeout)
                samples.append(sample)
                if client.transport is None:
                    transport, client = await loop.create_connection(_Client, host, port)
        finally:
            transport.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, total))))
    return samples, time.perf_counter() - started
