"""A small load generator for OpenAI endpoints: streamed requests with TTFT and inter-token times.

Used by the benchmarks and the demo: :func:`stream_chat` sends and times one request;
:func:`closed_loop` runs N clients, each sending its next request when the last one ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from syshaxd.sse import DONE, Decoder, Event


@dataclass
class Result:
    """One request as the client saw it."""

    ok: bool
    status: int = 0
    ttft: float | None = None  # seconds to the first chunk with content
    e2e: float = 0.0
    itls: list[float] = field(default_factory=list)  # gaps between content chunks
    chunks: int = 0
    error: str | None = None  # a clean error the client was told about
    lost: bool = False  # neither a complete answer nor a clean error (hang, truncation)
    #: The client's own connection pool closed the connection under the request (see
    #: :func:`closed_by_client`): the server neither cut nor reset it.
    client_side: bool = False


def closed_by_client(exc: BaseException) -> bool:
    """Whether a transport error was raised because this process closed the socket itself.

    anyio raises ``ClosedResourceError`` only for a stream closed locally; a server's reset or
    close arrives as ``ConnectionResetError`` or an end of stream instead. httpcore's pool can
    close a keep-alive connection it has just handed to a queued request when its own event
    loop stalls past the keep-alive expiry (encode/httpcore#1110): such a failure is the
    client's, and the request never reached a server that dropped it.
    """
    import anyio  # httpx's own dependency; imported here so this module stays asyncio-only

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, anyio.ClosedResourceError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict[str, Any], timeout: float = 120.0) -> Result:
    """Send one streamed chat request and time it chunk by chunk."""
    t0 = time.perf_counter()
    result = Result(ok=False)
    last: float | None = None
    saw_done = False

    def take(event: Event) -> None:
        nonlocal last, saw_done
        payload = event.data.strip()
        if payload == DONE:
            saw_done = True
            return
        now = time.perf_counter()
        if b'"error"' in payload[:20]:
            result.error = _error_text(payload) or "error event"
            return
        result.chunks += 1
        if result.ttft is None:
            result.ttft = now - t0
        elif last is not None:
            result.itls.append(now - last)
        last = now

    try:
        async with asyncio.timeout(timeout) if hasattr(asyncio, "timeout") else _null():
            async with client.stream("POST", url, json={**body, "stream": True}) as response:
                result.status = response.status_code
                if response.status_code != 200:
                    data = await response.aread()
                    result.error = _error_text(data) or f"HTTP {response.status_code}"
                    return _done(result, t0)
                decoder = Decoder()
                async for chunk in response.aiter_bytes():
                    for event in decoder.feed(chunk):
                        take(event)
                # A last event cut off before its blank line counts too: an answer that
                # ends in "data: [DONE]" without one is complete.
                for event in decoder.feed(b"\n\n"):
                    take(event)
    except TimeoutError:
        result.lost = True
        result.error = "client timeout (hung)"
        return _done(result, t0)
    except httpx.HTTPError as exc:
        result.lost = True
        result.client_side = closed_by_client(exc)
        result.error = f"{type(exc).__name__}: {exc}"
        return _done(result, t0)
    result.ok = saw_done and result.error is None
    if not saw_done and result.error is None:
        result.lost = True
        result.error = "stream ended without [DONE]"
    return _done(result, t0)


class _null:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def _done(result: Result, t0: float) -> Result:
    result.e2e = time.perf_counter() - t0
    return result


def _error_text(data: bytes) -> str | None:
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return str(parsed["error"].get("message"))
    return None


async def closed_loop(
    url: str,
    concurrency: int,
    total: int,
    body: Callable[[int], dict[str, Any]],
    *,
    on_result: Callable[[Result], None] | None = None,
    client: httpx.AsyncClient | None = None,
) -> list[Result]:
    """``concurrency`` clients share ``total`` requests; each keeps one request in flight."""
    own = client is None
    client = client or httpx.AsyncClient(
        timeout=httpx.Timeout(300.0), limits=httpx.Limits(max_connections=concurrency + 8,
                                                          max_keepalive_connections=concurrency + 8))
    results: list[Result] = []
    counter = iter(range(total))

    async def worker() -> None:
        for index in counter:
            result = await stream_chat(client, url, body(index))
            results.append(result)
            if on_result:
                on_result(result)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if own:
            await client.aclose()
    return results
