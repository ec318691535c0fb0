"""Counting what a client got: the engines' stream shapes, byte for byte, through the counter.

The chunks are the engines' own: llama-server's as it sends them (a build of the one the llama
tests run), vLLM's as its OpenAI server writes them (role chunk, content chunks, the last
content chunk with ``finish_reason``, a usage-only chunk, tool-call deltas, one choice per
chunk for ``n`` > 1; llama-server's reports of each choice apart).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from syshaxd.conductor.assemble import Assembler
from syshaxd.conductor.records import Record
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


# -- several choices (n > 1): the sum over the choices, the prompt once -------------------------

LLAMA_HEAD = {"created": 1, "id": "chatcmpl-n", "model": "m", "system_fingerprint": "b1"}


def _llama_choice(kind: str, index: int, texts: list[str], *, usage: bool) -> list[list[dict[str, Any]]]:
    """One choice of a llama-server stream of several, as the built server sends it: its chunks,
    one list per step (the steps of several choices interleave). A chat choice opens with its
    role chunk and ends with an empty delta (``timings``), then, asked for usage, a usage-only
    chunk of its own; a completion choice's last chunk carries its usage and timings."""
    timings = {"cache_n": 28, "prompt_n": 1, "predicted_n": len(texts)}
    own_usage = {"completion_tokens": len(texts), "prompt_tokens": 29, "total_tokens": 29 + len(texts)}
    if kind == "chat":
        head = {**LLAMA_HEAD, "object": "chat.completion.chunk"}
        steps = [[{"choices": [{"finish_reason": None, "index": index, "delta": {"role": "assistant", "content": None}}],
                   **head}]]
        steps += [[{"choices": [{"finish_reason": None, "index": index, "delta": {"content": t}}], **head}]
                  for t in texts]
        last: dict[str, Any] = {"choices": [{"finish_reason": "length", "index": index, "delta": {}}], **head}
        if usage:
            steps[-1] += [last, {"choices": [], **head, "usage": own_usage, "timings": timings}]
        else:
            steps[-1].append({**last, "timings": timings})
        return steps
    head = {**LLAMA_HEAD, "object": "text_completion"}
    steps = [[{"choices": [{"text": t, "index": index, "logprobs": None, "finish_reason": None}], **head}]
             for t in texts]
    steps[-1].append({"choices": [{"text": "", "index": index, "logprobs": None, "finish_reason": "length"}],
                      **head, "usage": own_usage, "timings": timings})
    return steps


def _interleave(*choices: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(max(len(c) for c in choices)):
        for steps in choices:
            if i < len(steps):
                out += steps[i]
    return out


def _count_n(data: bytes, n: int, cut: int | None = None) -> Tally:
    counter = StreamCounter(n)
    for i in range(0, len(data), cut or len(data)):
        counter.feed(data[i:i + (cut or len(data))])
    return counter.tally()


@pytest.mark.parametrize("cut", [None, 5])
def test_vllm_n_choices_are_its_one_usage_chunk_and_the_longest_choice_times_the_tokens(cut: int | None) -> None:
    one, two, three = vllm_chat(["a"] * 4, index=0), vllm_chat(["b"] * 2, index=1), vllm_chat(["c"] * 3, index=2)
    chunks = _interleave(*([[c] for c in choice] for choice in (one, two, three)))
    with_usage = sse(*chunks, {**one[0], "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 9,
                                                                  "total_tokens": 20}}, "[DONE]")
    tally = _count_n(with_usage, 3, cut)
    assert (tally.output_tokens, tally.output_source, tally.prompt_tokens) == (9, "usage", 11)
    assert tally.longest == 4  # choice 0: its tokens set the answer's TPOT
    without = _count_n(sse(*chunks, "[DONE]"), 3, cut)
    assert (without.output_tokens, without.output_source, without.longest) == (9, "counted", 4)


def test_vllm_continuous_usage_of_n_choices_is_each_choices_own_until_the_total_comes() -> None:
    # continuous_usage_stats: every chunk carries its own choice's count so far; the total last.
    chunks = []
    for step in range(3):
        for index in (0, 1):
            chunks.append({"choices": [{"index": index, "delta": {"content": "x"}, "finish_reason": None}],
                           "usage": {"prompt_tokens": 11, "completion_tokens": step + 1}})
    counter = StreamCounter(2)
    counter.feed(sse(*chunks))
    assert (counter.tally().output_tokens, counter.tally().output_source) == (6, "usage")
    counter.feed(sse({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 6}}, "[DONE]"))
    assert (counter.tally().output_tokens, counter.tally().prompt_tokens) == (6, 11)


@pytest.mark.parametrize(("kind", "usage", "source"), [("chat", True, "usage"), ("chat", False, "timings"),
                                                      ("completion", False, "usage")])
def test_llama_reports_each_choice_apart_and_they_are_summed(kind: str, usage: bool, source: str) -> None:
    data = sse(*_interleave(_llama_choice(kind, 0, ["a", "b", "c"], usage=usage),
                            _llama_choice(kind, 1, ["d", "e"], usage=usage)), "[DONE]")
    tally = _count_n(data, 2)
    assert (tally.output_tokens, tally.output_source) == (5, source)
    assert (tally.prompt_tokens, tally.prompt_source) == (29, source)  # the prompt once, not per choice
    assert tally.longest == 3
    # Told nothing of n (a client's n the body did not say): the sum all the same.
    assert count(data).output_tokens == 5


def test_an_answer_assembled_from_llamas_choices_reports_all_their_tokens() -> None:
    for kind in ("chat", "completion"):
        assembler = Assembler(kind == "chat")
        for chunk in _interleave(_llama_choice(kind, 0, ["a", "b", "c"], usage=True),
                                 _llama_choice(kind, 1, ["d", "e"], usage=True)):
            assembler.add(chunk)
        answer = assembler.answer()
        assert [c["index"] for c in answer["choices"]] == [0, 1]
        assert answer["usage"]["completion_tokens"] == 5 and answer["usage"]["prompt_tokens"] == 29
        assert answer["usage"]["total_tokens"] == 34


def test_a_record_of_n_choices_takes_its_tpot_from_the_longest_choice() -> None:
    base = dict(request_id="r", arrival=0.0, kind="chat", stream=True, prompt_tokens=10, max_tokens=8,
                outcome="ok", decision=None, seen=None, limits=None, queued=0.0, ttft=0.1, e2e=1.0)
    one = Record(**base, output_tokens=8, decode=0.7)  # type: ignore[arg-type]
    assert one.tpot() == pytest.approx(0.1)
    # Four choices of 8 decoding side by side: 32 tokens in 0.7 s, 7 steps of 0.1 s each.
    four = Record(**base, output_tokens=32, decode=0.7, choices=4, longest=8)  # type: ignore[arg-type]
    assert four.tpot() == pytest.approx(0.1) and four.model().choices == 4


def test_a_stream_of_choices_cut_after_some_of_their_reports_is_counted_from_its_deltas() -> None:
    # llama-server reported choice 0 (3 tokens) and the client left while choice 1 had 2: the
    # report covers part of the answer, the deltas all of what was written.
    steps = _interleave(_llama_choice("chat", 0, ["a", "b", "c"], usage=True),
                        _llama_choice("chat", 1, ["d", "e", "f", "g"], usage=True))
    last = next(i for i, c in enumerate(steps) if c["choices"] and c["choices"][0]["delta"].get("content") == "f")
    cut = steps[:last + 1]  # choice 0 ended and reported; choice 1 wrote d, e, f
    tally = _count_n(sse(*cut), 2)
    assert (tally.output_tokens, tally.output_source) == (6, "counted")
