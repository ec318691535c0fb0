"""Non-streamed answers assembled from an engine's stream (what the conductor does for llama-server)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from syshaxd.conductor.assemble import Assembler, assemble, streaming_body
from syshaxd.engines import EngineFailure


def _sse(*events: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


class _Chunks(httpx.AsyncByteStream):
    """The body in 7-byte pieces, so events arrive split across reads."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.raw), 7):
            yield self.raw[i : i + 7]


async def _assemble(raw: bytes, chat: bool = True) -> dict[str, Any]:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=_Chunks(raw)))
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        response = await client.send(client.build_request("POST", "/v1/chat/completions"), stream=True)
        result: dict[str, Any] = json.loads(await assemble(response, "cpu0", chat))
        return result


def test_streaming_body_asks_for_a_stream_with_usage_and_keeps_everything_else() -> None:
    body = json.loads(streaming_body(b'{"stream": false, "max_tokens": 3, "x": "\\ud800"}'))
    assert body == {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 3, "x": "\ud800"}


async def test_a_chat_stream_becomes_one_chat_completion() -> None:
    top = {"id": "chatcmpl-1", "created": 5, "model": "m", "system_fingerprint": "b1", "object": "chat.completion.chunk"}
    raw = _sse(
        {**top, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]},
        {**top, "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}, "finish_reason": None}]},
        {**top, "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
        {**top, "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}]},
        {**top, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "timings": {"prompt_n": 1}},
        {**top, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}},
    )
    answer = await _assemble(raw)
    assert answer == {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 5, "model": "m", "system_fingerprint": "b1",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hello", "reasoning_content": "hm"}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
        "timings": {"prompt_n": 1},
    }


async def test_tool_call_deltas_are_joined() -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    raw = _sse(
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "get", "arguments": "{\"a\""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
    )
    message = (await _assemble(raw))["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [{"id": "call_1", "type": "function",
                                      "function": {"name": "get", "arguments": "{\"a\": 1}"}}]


async def test_a_completions_stream_keeps_text_and_logprobs() -> None:
    raw = _sse(
        {"id": "x", "choices": [{"index": 0, "text": "a", "logprobs": {"content": [{"token": "a"}]}}]},
        {"id": "x", "choices": [{"index": 0, "text": "b", "logprobs": {"content": [{"token": "b"}]}}]},
        {"id": "x", "choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": {"completion_tokens": 2}},
    )
    answer = await _assemble(raw, chat=False)
    assert answer["object"] == "text_completion"
    assert answer["choices"] == [{"index": 0, "text": "ab", "finish_reason": "length",
                                  "logprobs": {"content": [{"token": "a"}, {"token": "b"}]}}]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_sse({"choices": [{"delta": {"content": "a"}}]}, done=False), "without [DONE]"),
        (_sse({"error": {"message": "slot crashed", "code": 500}}), "slot crashed"),
        (b"data: {not json\n\n", "not JSON"),
    ],
)
async def test_a_broken_stream_is_an_engine_failure(raw: bytes, message: str) -> None:
    with pytest.raises(EngineFailure, match=message.replace("[", r"\[").replace("]", r"\]")):
        await _assemble(raw)


def test_choices_keep_their_order_by_index() -> None:
    assembler = Assembler(chat=False)
    assembler.add({"choices": [{"index": 1, "text": "B"}]})
    assembler.add({"choices": [{"index": 0, "text": "A", "finish_reason": "stop"}]})
    assert [c["text"] for c in assembler.answer()["choices"]] == ["A", "B"]
