"""Counting what a client got: the engines' stream shapes, byte for byte, through the counter.

The chunks are the engines' own: llama-server's as it sends them (a build of the one the llama
tests run), vLLM's as its OpenAI server writes them (role chunk, content chunks, the last
content chunk with ``finish_reason``, a usage-only chunk, tool-call deltas, one choice per
chunk for ``n`` > 1).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from syshaxd.conductor.tally import StreamCounter, Tally, whole_tally


def sse(*chunks: dict[str, Any] | str) -> bytes:
    """An event stream of these chunks (a str is sent as is: ``[DONE]``)."""
    return b"".join(b"data: " + (c.encode() if isinstance(c, str) else json.dumps(c, separators=(",", ":")).encode())
                    + b"\n\n" for c in chunks)


def llama_chat(*texts: str, usage: bool = False) -> bytes:
    head = {"created": 1, "id": "chatcmpl-x", "model": "m", "system_fingerprint": "b1", "object": "chat.completion.chunk"}
    chunks: list[dict[str, Any] | str] = [
        {"choices": [{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}], **head}]
    chunks += [{"choices": [{"finish_reason": None, "index": 0, "delta": {"content": t}}], **head} for t in texts]
    last: dict[str, Any] = {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}], **head}
    timings = {"cache_n": 20, "prompt_n": 9, "predicted_n": len(texts)}
    if usage:
        chunks.append(last)
        chunks.append({"choices": [], **head, "usage": {"completion_tokens": len(texts), "prompt_tokens": 29,
                                                         "total_tokens": 29 + len(texts)}, "timings": timings})
    else:
        chunks.append({**last, "timings": timings})
    return sse(*chunks, "[DONE]")


def vllm_chat(texts: list[str], *, index: int = 0, usage: int | None = None, role: bool = True) -> list[dict[str, Any]]:
    """vLLM's chat chunks for one choice: the last content chunk carries finish_reason."""
    head = {"id": "chatcmpl-v", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out: list[dict[str, Any]] = []
    if role:
        out.append({**head, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}]})
    for i, text in enumerate(texts):
        last = i == len(texts) - 1
        out.append({**head, "choices": [{"index": index, "delta": {"content": text}, "logprobs": None,
                                         "finish_reason": "length" if last else None,
                                         "stop_reason": None}]})
    if usage is not None:
        out.append({**head, "choices": [], "usage": {"prompt_tokens": 11, "total_tokens": 11 + usage,
                                                     "completion_tokens": usage}})
    return out


def count(data: bytes, cut: int | None = None) -> Tally:
    counter = StreamCounter()
    if cut is None:
        counter.feed(data)
    else:
        for i in range(0, len(data), cut):
            counter.feed(data[i:i + cut])
    return counter.tally()


def test_a_llama_chat_stream_counts_its_content_deltas_not_the_role_or_closing_delta() -> None:
    tally = count(llama_chat("a", "b", "c", "d"))
    # llama-server's timings on its last chunk are its own count: used before the deltas.
    assert (tally.output_tokens, tally.output_source) == (4, "timings")
    assert (tally.prompt_tokens, tally.prompt_source) == (29, "timings")
    assert tally.first_token is not None and tally.last_token is not None


def test_the_engines_usage_comes_first() -> None:
    tally = count(llama_chat("a", "b", usage=True))
    assert (tally.output_tokens, tally.output_source, tally.prompt_tokens, tally.prompt_source) == (2, "usage", 29,
                                                                                                      "usage")


@pytest.mark.parametrize("cut", [None, 1, 7, 64])
def test_a_vllm_stream_without_usage_is_counted_from_its_deltas_however_it_is_cut(cut: int | None) -> None:
    data = sse(*vllm_chat(["x"] * 9), "[DONE]")
    tally = count(data, cut)
    # The role chunk carries no token; the last content chunk (with finish_reason) does.
    assert (tally.output_tokens, tally.output_source) == (9, "counted")
    assert tally.prompt_tokens is None and tally.prompt_source is None


def test_crlf_line_ends_count_the_same() -> None:
    data = sse(*vllm_chat(["x"] * 5), "[DONE]").replace(b"\n", b"\r\n")
    assert count(data, 3).output_tokens == 5


def test_n_choices_count_every_choice() -> None:
    # vLLM streams n > 1 as one choice per chunk, interleaved; some servers put several in one.
    one = vllm_chat(["a", "b", "c"], index=0)
    two = vllm_chat(["d", "e"], index=1)
    interleaved = [chunk for pair in zip(one, two, strict=False) for chunk in pair] + one[len(two):]
    assert count(sse(*interleaved, "[DONE]")).output_tokens == 5
    both = {**one[1], "choices": [one[1]["choices"][0], two[1]["choices"][0]]}
    assert count(sse(both, "[DONE]")).output_tokens == 2


def test_tool_call_deltas_are_tokens_and_a_closing_delta_is_not() -> None:
    head = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    def call(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    chunks = [
        call({"role": "assistant", "content": ""}),
        call({"tool_calls": [{"id": "call_1", "type": "function", "index": 0,
                              "function": {"name": "get_weather", "arguments": ""}}]}),
        call({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}),
        call({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
        call({"content": ""}, "tool_calls"),
    ]
    assert count(sse(*chunks, "[DONE]")).output_tokens == 3


def test_completions_count_non_empty_text_only() -> None:
    def chunk(text: str, finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}], "object":
                "text_completion", "usage": None}
    tally = count(sse(chunk("a"), chunk("b"), chunk(""), chunk("", "length"), "[DONE]"))
    assert (tally.output_tokens, tally.output_source) == (2, "counted")


def test_an_error_event_reasoning_and_comments() -> None:
    reasoning = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
    spaced = b'data: {"choices": [{"index": 0, "delta": {"content": "spaced"}}]}\n\n'
    error = b'data: {"error":{"message":"boom","content":"x"}}\n\n'
    data = b": keep-alive\n\n" + sse(reasoning) + spaced + error + sse("[DONE]")
    assert count(data).output_tokens == 2


def test_token_times_are_those_of_the_first_and_last_token_written() -> None:
    counter = StreamCounter()
    role, *contents = vllm_chat(["a", "b", "c"])
    counter.feed(sse(role))
    assert counter.tally().first_token is None  # a role chunk is not a token
    for chunk in contents:
        counter.feed(sse(chunk))
    tally = counter.tally()
    assert tally.first_token is not None and tally.last_token is not None
    assert tally.last_token >= tally.first_token and tally.decode == tally.last_token - tally.first_token


def test_a_whole_answer_has_counts_and_no_token_times() -> None:
    tally = whole_tally({"choices": [], "usage": {"prompt_tokens": 29, "completion_tokens": 12}})
    assert tally == Tally(12, "usage", 29, "usage")
    assert tally.decode is None
    assert whole_tally({"choices": [], "timings": {"predicted_n": 3, "prompt_n": 1, "cache_n": 4}}) == Tally(
        3, "timings", 5, "timings")
    assert whole_tally({"choices": []}) == Tally()
