"""The load generator's view of one streamed answer: chunks, TTFT and gaps, errors, truncation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

import httpx
import pytest

from demo import loadgen
from demo.loadgen import Result, stream_chat

URL = "http://engine/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def delta(text: str) -> bytes:
    """One OpenAI chunk event."""
    return b"data: " + json.dumps({"choices": [{"delta": {"content": text}}]}).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
ERROR = b'data: {"error": {"message": "engine gpu0 failed", "type": "server_error"}}\n\n'


class Clock:
    """The load generator's clock in these tests: it moves only when the engine below waits."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


class Paced(httpx.AsyncByteStream):
    """The given network chunks, each ``gap`` seconds of ``clock`` after the last (0: all at once)."""

    def __init__(self, chunks: Sequence[bytes], clock: Clock, gap: float = 0.0) -> None:
        self.chunks = chunks
        self.clock = clock
        self.gap = gap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.clock.now += self.gap
            await asyncio.sleep(0)
            yield chunk


async def run(chunks: Sequence[bytes], *, gap: float = 0.0, status: int = 200) -> tuple[Result, dict[str, object]]:
    """stream_chat against an engine that answers ``chunks``; also returns the body it was sent."""
    sent: dict[str, object] = {}
    clock = Clock()

    def answer(request: httpx.Request) -> httpx.Response:
        sent.update(json.loads(request.content))
        return httpx.Response(status, stream=Paced(chunks, clock, gap), headers={"content-type": "text/event-stream"})

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loadgen, "time", clock)
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return await stream_chat(client, URL, BODY, timeout=10), sent


async def test_a_complete_stream_counts_chunks_and_times_each_gap() -> None:
    result, sent = await run([delta("a"), delta("b"), delta("c"), DONE], gap=0.02)
    assert sent["stream"] is True
    assert result.ok and not result.lost and result.error is None and result.status == 200
    assert result.chunks == 3
    assert result.ttft == pytest.approx(0.02) and result.itls == pytest.approx([0.02, 0.02])
    assert result.e2e == pytest.approx(0.08)  # the last gap brought [DONE]


async def test_events_split_across_network_chunks_and_crlf_read_the_same() -> None:
    stream = b"".join([b": keep-alive\r\n\r\n", delta("a").replace(b"\n", b"\r\n"), delta("b"), DONE])
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    result, _ = await run(pieces)
    assert result.ok and result.chunks == 2 and len(result.itls) == 1


async def test_an_error_event_is_a_clean_error_even_with_done_after_it() -> None:
    result, _ = await run([delta("a"), b"event: error\n" + ERROR, DONE])
    assert not result.ok and not result.lost
    assert result.error == "engine gpu0 failed" and result.chunks == 1


async def test_an_error_event_without_a_message_is_still_an_error() -> None:
    result, _ = await run([b'data: {"error": "bad"}\n\n', DONE])
    assert not result.ok and result.error == "error event" and result.chunks == 0


async def test_a_stream_without_done_is_lost() -> None:
    result, _ = await run([delta("a"), delta("b")])
    assert not result.ok and result.lost and result.error == "stream ended without [DONE]"
    assert result.chunks == 2


async def test_a_done_cut_off_before_its_blank_line_still_ends_the_answer() -> None:
    result, _ = await run([delta("a"), b"data: [DONE]"])
    assert result.ok and result.chunks == 1


async def test_a_body_that_is_no_event_stream_is_lost_not_counted() -> None:
    result, _ = await run([b"Internal things went wrong\n"])
    assert result.lost and result.chunks == 0 and result.error == "stream ended without [DONE]"


@pytest.mark.parametrize(
    ("body", "error"),
    [(b'{"error": {"message": "no such model", "code": 404}}', "no such model"), (b"gateway down", "HTTP 503")],
)
async def test_a_refusal_keeps_its_status_and_message(body: bytes, error: str) -> None:
    result, _ = await run([body], status=503)
    assert not result.ok and not result.lost and result.status == 503 and result.error == error
