"""Records that match what the client received, against the simulator's engines.

A real syshaxd in front of simulator engines (vLLM's shape, and llama-server's, whose whole
answers syshaxd assembles from a stream), the official openai client, one request per case:
the record's output and prompt tokens are the usage the client got, or its own count of the
deltas when it got none; never more than the maximum; TPOT from the token times; several
choices (``n``) as their sum. Also through API workers (the record crosses the ledger), a
prefill/decode split's merged stream, and a split of several choices that runs whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.plugins.stack import Stack, _stack_factory
from tests.records._client import MESSAGES, abort_after, ask, check, record

KINDS = ("chat", "completion")


def _socket(stack: Stack) -> Path:
    return stack.tmp / "run" / "control.sock"


@pytest.fixture(scope="module", params=["vllm-v1", "llamacpp", "workers"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Simulator engines in one dialect behind syshaxd (``workers``: vLLM's, two API processes)."""
    with _stack_factory(tmp_path_factory.mktemp(f"records-{request.param}")) as start:
        if request.param == "workers":
            running = start(dialect="vllm-v1", config={"services": {"conductor": {"workers": 2}}})
        else:
            running = start(dialect=request.param)
        running.extra["dialect"] = "vllm-v1" if request.param == "workers" else request.param
        yield running


def _engine_prompt(stack: Stack, kind: str) -> int:
    """The engine's own prompt count for the cases' prompt (a whole answer's usage)."""
    seen = ask(stack.openai(), kind, stream=False, max_tokens=1, tag="prompt")
    assert seen.usage_prompt is not None
    return seen.usage_prompt


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_answer_is_recorded_with_the_usage_the_client_got(stack: Stack, kind: str) -> None:
    seen = ask(stack.openai(), kind, stream=False, max_tokens=9, extra_body={"ignore_eos": True})
    rec = record(_socket(stack), seen.request_id)
    assert seen.usage_out == 9
    check(rec, seen)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_with_usage_is_recorded_with_that_usage(stack: Stack, kind: str) -> None:
    seen = ask(stack.openai(), kind, stream=True, usage=True, max_tokens=8, extra_body={"ignore_eos": True})
    rec = record(_socket(stack), seen.request_id)
    assert seen.usage_out == seen.deltas == 8
    check(rec, seen)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_without_usage_records_the_engines_counts_the_client_never_sees(stack: Stack, kind: str) -> None:
    seen = ask(stack.openai(), kind, stream=True, max_tokens=8, extra_body={"ignore_eos": True})
    rec = record(_socket(stack), seen.request_id)
    assert seen.deltas == 8  # a chat stream's role delta is not a token: the record said 9 here
    if stack.extra["dialect"] == "vllm-v1" or kind == "chat":
        # syshaxd asked vLLM for usage; the client, not asking, got none (llama-server puts
        # usage on every completion stream itself).
        assert seen.usage_out is None
    check(rec, seen, engine_prompt=_engine_prompt(stack, kind))
    assert rec.output_tokens == 8


def test_the_usage_syshaxd_asked_for_never_reaches_a_client_that_did_not(stack: Stack) -> None:
    body = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 5, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions", json=body, timeout=30) as answer:
        raw = answer.read()
    events = [block for block in raw.split(b"\n\n") if block]
    assert events[-1] == b"data: [DONE]" and b'"usage":{' not in raw
    assert all(block.startswith(b"data: {") for block in events[:-1])
    assert sum(1 for block in events if b'"choices":[]' in block) == 0


def test_a_chat_prompt_is_the_engines_count_with_its_template(stack: Stack) -> None:
    seen = ask(stack.openai(), "chat", stream=False, max_tokens=1)
    rec = record(_socket(stack), seen.request_id)
    assert seen.usage_prompt is not None
    assert (rec.prompt_tokens, rec.prompt_tokens_source) == (seen.usage_prompt, "usage")


def test_a_request_with_tools_is_recorded_as_answered(stack: Stack) -> None:
    # The simulator answers a request with tools in text: the record still follows its usage.
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    for stream in (False, True):
        seen = ask(stack.openai(), "chat", stream=stream, usage=stream, max_tokens=6, tools=tools,
                   extra_body={"ignore_eos": True})
        check(record(_socket(stack), seen.request_id), seen)


@pytest.mark.parametrize("kind", KINDS)
def test_n_choices_are_recorded_as_the_sum_the_client_got(stack: Stack, kind: str) -> None:
    client = stack.openai()
    sampling = {"ignore_eos": True}
    # Whole: the usage covers every choice (syshaxd sums llama-server's, which it assembles).
    whole = ask(client, kind, stream=False, max_tokens=6, n=3, extra_body=sampling)
    assert (whole.choices, whole.usage_out) == (3, 18)
    rec = record(_socket(stack), whole.request_id)
    check(rec, whole)
    assert (rec.choices, rec.output_tokens, rec.max_tokens) == (3, 18, 6)
    # Streamed, asking for usage: vLLM's one usage chunk for all; llama-server's one per choice
    # (chat) or on each choice's last chunk (completions), which the record sums.
    streamed = ask(client, kind, stream=True, usage=True, max_tokens=5, n=2, extra_body=sampling)
    assert (streamed.choices, streamed.deltas, sum(streamed.usages) if len(streamed.usages) > 1
            else streamed.usage_out) == (2, 10, 10)
    rec = record(_socket(stack), streamed.request_id)
    check(rec, streamed)
    assert (rec.output_tokens, rec.output_tokens_source) == (10, "usage")
    assert rec.tpot is not None and rec.ttft is not None
    # Streamed, asking for nothing: the engine's counts the client never saw, or its own deltas.
    bare = ask(client, kind, stream=True, max_tokens=5, n=2, extra_body=sampling)
    assert (bare.choices, bare.deltas) == (2, 10)
    rec = record(_socket(stack), bare.request_id)
    check(rec, bare, engine_prompt=_engine_prompt(stack, kind))
    assert rec.output_tokens == 10


def test_n_past_the_cap_is_refused_naming_n_and_never_recorded(stack: Stack) -> None:
    client = stack.openai()
    with pytest.raises(openai.BadRequestError, match="'n' must be from 1 to 16, got 17") as refused:
        client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=4, n=17,
                                       extra_headers={"X-Request-Id": "rec-n17"})
    assert refused.value.body["param"] == "n"  # type: ignore[index]
    seen = ask(client, "chat", stream=False, max_tokens=2)  # a later request is recorded ...
    record(_socket(stack), seen.request_id)
    with pytest.raises(AssertionError, match="no record"):  # ... and the refused one never was
        record(_socket(stack), "rec-n17", timeout=0.5)


@pytest.mark.parametrize("dialect", ["vllm-v1", "llamacpp"])
def test_an_aborted_stream_records_what_was_written_to_the_client(make_stack: Callable[..., Stack],
                                                                   dialect: str) -> None:
    # Engines at real speed (~10 ms a token): 1,500 tokens take 15 s, the client leaves after 3.
    stack = make_stack(dialect=dialect, speed=1.0)
    for kind in KINDS:
        seen = abort_after(stack.openai(), kind, 3, max_tokens=1500, extra_body={"ignore_eos": True})
        rec = record(_socket(stack), seen.request_id)
        assert rec.outcome == "client_disconnect"
        assert rec.output_tokens_source == "counted"
        # The client read 3 tokens; the daemon may have written a few more before it saw the close.
        assert rec.output_tokens is not None and seen.deltas <= rec.output_tokens < rec.max_tokens == 1500


def test_a_split_stream_is_recorded_with_its_engines_usage(make_stack: Callable[..., Stack]) -> None:
    # /v1/chat/pd_disagg forces a split: the GPU writes the first token, the CPU the rest, and
    # syshaxd merges both into one stream (the openai client has no method for this route).
    stack = make_stack(handoff="recompute")
    for usage in (True, False):
        rid = f"rec-split-{usage}"
        body = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 7, "stream": True, "ignore_eos": True,
                **({"stream_options": {"include_usage": True}} if usage else {})}
        with httpx.stream("POST", f"{stack.url}/v1/chat/pd_disagg", json=body, headers={"X-Request-Id": rid},
                          timeout=30) as answer:
            assert answer.status_code == 200
            chunks = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")]
        rec = record(_socket(stack), rid)
        deltas = sum(1 for c in chunks for ch in c["choices"] if ch["delta"].get("content"))
        usages = [c["usage"] for c in chunks if c.get("usage")]
        assert rec.decision is not None and rec.decision.mode == "pd_split", rec
        assert deltas == 7 and (usages[-1]["completion_tokens"] == 7 if usage else not usages)
        assert (rec.output_tokens, rec.output_tokens_source) == (7, "usage")
        assert rec.tpot is not None and rec.ttft is not None and rec.ttft <= rec.e2e


def test_a_split_of_n_choices_runs_whole_and_says_why(make_stack: Callable[..., Stack]) -> None:
    # No handoff carries n sequences over: /v1/chat/pd_disagg with n=2 runs whole on the CPU.
    stack = make_stack(handoff="recompute")
    body = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 4, "n": 2, "ignore_eos": True}
    answer = httpx.post(f"{stack.url}/v1/chat/pd_disagg", json=body, headers={"X-Request-Id": "rec-split-n2"},
                        timeout=30)
    assert answer.status_code == 200, answer.text
    assert (answer.headers["x-syshax-mode"], answer.headers["x-syshax-device"]) == ("whole", "cpu")
    assert answer.headers["x-syshax-reason"].startswith("n=2 choices, whole on cpu: a split hands over one sequence")
    assert [c["index"] for c in answer.json()["choices"]] == [0, 1]
    rec = record(_socket(stack), "rec-split-n2")
    assert rec.decision is not None and (rec.decision.mode, rec.decision.device) == ("whole", "cpu")
    assert (rec.choices, rec.output_tokens) == (2, answer.json()["usage"]["completion_tokens"]) == (2, 8)
