"""Records that match what the client received, against two real llama-servers.

The operator's setting of issue 37: syshaxd in front of a GPU-role and a CPU-role llama-server,
the official openai client. Per case the record's output and prompt tokens equal the usage
the client received (or, for a chat stream that asked for none, the client's own count of the
deltas and the engine's prompt count with its chat template); never more than the maximum.
Several choices (``n``) as their sum, which llama-server itself reports only choice by choice.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.llama._util import GREEDY, NO_EOS
from tests.plugins.llama import LlamaBuild
from tests.plugins.llama_stack import LlamaStack, start_llama_stack
from tests.records._client import MESSAGES, PROMPT, abort_after, ask, check, record

pytestmark = pytest.mark.llama

KINDS = ("chat", "completion")
SAMPLING = {**GREEDY, **NO_EOS}


@pytest.fixture(scope="module")
def stack(llama_build: LlamaBuild) -> Iterator[LlamaStack]:
    """syshaxd with two real llama-servers (``--jinja``: requests with tools are served)."""
    work = Path(tempfile.mkdtemp(prefix="syshax-llama-records-", dir="/tmp"))
    running = start_llama_stack(llama_build, work, n_ctx=4 * 4096, gpu_args=("--alias", "gpu-role", "--jinja"),
                                cpu_args=("--alias", "cpu-role", "--jinja"))
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(work, ignore_errors=True)


def _engine_prompt(stack: LlamaStack, kind: str) -> int:
    """llama-server's own prompt count for the cases' prompt (a whole answer's usage, direct)."""
    body = {"max_tokens": 1, **({"messages": MESSAGES} if kind == "chat" else {"prompt": PROMPT})}
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    answer = httpx.post(stack.gpu.url + path, json=body, timeout=30).json()
    return int(answer["usage"]["prompt_tokens"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_answer_is_recorded_with_the_usage_the_client_got(stack: LlamaStack, kind: str) -> None:
    # syshaxd streams from llama-server and assembles the answer: these were recorded with
    # output_tokens null.
    seen = ask(stack.openai(), kind, stream=False, max_tokens=9, extra_body=SAMPLING)
    rec = record(stack.socket_path, seen.request_id)
    assert seen.usage_out == 9
    check(rec, seen, engine_prompt=_engine_prompt(stack, kind))
    assert rec.tpot is not None  # its tokens' times as syshaxd read them


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_with_usage_is_recorded_with_that_usage(stack: LlamaStack, kind: str) -> None:
    seen = ask(stack.openai(), kind, stream=True, usage=True, max_tokens=8, extra_body=SAMPLING)
    rec = record(stack.socket_path, seen.request_id)
    assert seen.usage_out == seen.deltas == 8
    check(rec, seen, engine_prompt=_engine_prompt(stack, kind))


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_without_usage_records_the_clients_count_and_the_engines_prompt(stack: LlamaStack,
                                                                                  kind: str) -> None:
    for max_tokens in (8, 128):  # the operator saw 9/8 and 129/128
        seen = ask(stack.openai(), kind, stream=True, max_tokens=max_tokens, extra_body=SAMPLING)
        rec = record(stack.socket_path, seen.request_id)
        check(rec, seen, engine_prompt=_engine_prompt(stack, kind))
        # It ran to its length (no EOS): the engine's own count says so, though the client may
        # have seen fewer deltas (126 for 128 tokens here once).
        assert rec.output_tokens == max_tokens
        assert rec.output_tokens_source == ("timings" if kind == "chat" else "usage")


def test_a_chat_prompt_counts_the_chat_template(stack: LlamaStack) -> None:
    # The operator's case: a short message recorded as 5 prompt tokens, the engine's usage 29.
    seen = ask(stack.openai(), "chat", stream=False, max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    rec = record(stack.socket_path, seen.request_id)
    assert seen.usage_prompt is not None and seen.usage_prompt > 10
    assert (rec.prompt_tokens, rec.prompt_tokens_source) == (seen.usage_prompt, "usage")


def test_a_request_with_tools_is_recorded_with_its_usage(stack: LlamaStack) -> None:
    # The tiny model's template has no tool format: it answers in text (the counter's tool-call
    # deltas are checked in test_counter, in vLLM's shape).
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    for stream in (False, True):
        seen = ask(stack.openai(), "chat", stream=stream, usage=stream, max_tokens=6, tools=tools,
                   extra_body=SAMPLING)
        check(record(stack.socket_path, seen.request_id), seen)


@pytest.mark.parametrize("kind", KINDS)
def test_n_choices_are_recorded_as_the_sum_the_client_got(stack: LlamaStack, kind: str) -> None:
    # llama-server runs each choice in a slot of its own and counts each apart: its whole answer
    # reports one choice's usage, its streams one usage (or timings) per choice. The record and
    # the whole answer syshaxd assembles carry the sum, as vLLM's usage does.
    client = stack.openai()
    prompt = _engine_prompt(stack, kind)
    whole = ask(client, kind, stream=False, max_tokens=6, n=3, extra_body=SAMPLING)
    assert (whole.choices, whole.usage_out, whole.usage_prompt) == (3, 18, prompt)
    rec = record(stack.socket_path, whole.request_id)
    check(rec, whole, engine_prompt=prompt)
    assert (rec.choices, rec.output_tokens, rec.output_tokens_source) == (3, 18, "usage")
    streamed = ask(client, kind, stream=True, usage=True, max_tokens=5, n=2, extra_body=SAMPLING)
    assert streamed.choices == 2 and streamed.usages == (5, 5)  # one per choice, not one for all
    rec = record(stack.socket_path, streamed.request_id)
    check(rec, streamed, engine_prompt=prompt)
    assert (rec.output_tokens, rec.output_tokens_source) == (10, "usage")
    assert rec.ttft is not None and rec.tpot is not None
    bare = ask(client, kind, stream=True, max_tokens=5, n=2, extra_body=SAMPLING)
    rec = record(stack.socket_path, bare.request_id)
    check(rec, bare, engine_prompt=prompt)
    assert (rec.output_tokens, rec.output_tokens_source) == (10, "timings" if kind == "chat" else "usage")


def test_n_past_the_servers_slots_is_its_own_error_passed_on(stack: LlamaStack) -> None:
    with pytest.raises(openai.BadRequestError, match=r"Field 'n': Value must be between 1 <= value <= 4, but got 5"):
        stack.openai().chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, n=5,
                                               extra_headers={"X-Request-Id": "rec-llama-n5"})
    rec = record(stack.socket_path, "rec-llama-n5")
    assert rec.outcome == "rejected" and rec.choices == 5 and rec.output_tokens is None


def test_n_past_the_cap_is_refused_and_not_recorded(stack: LlamaStack) -> None:
    with pytest.raises(openai.BadRequestError, match="'n' must be from 1 to 16, got 17"):
        stack.openai().chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4, n=17,
                                               extra_headers={"X-Request-Id": "rec-llama-n17"})
    with pytest.raises(AssertionError, match="no record"):
        record(stack.socket_path, "rec-llama-n17", timeout=0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_an_aborted_stream_records_what_was_written_to_the_client(stack: LlamaStack, kind: str) -> None:
    seen = abort_after(stack.openai(), kind, 3, max_tokens=4000, extra_body=SAMPLING)
    rec = record(stack.socket_path, seen.request_id)
    assert rec.outcome == "client_disconnect"
    assert rec.output_tokens_source == "counted"
    assert rec.output_tokens is not None and seen.deltas <= rec.output_tokens <= rec.max_tokens


@pytest.mark.parametrize("stream", [True, False])
def test_a_slot_handoff_is_recorded_with_the_decoding_servers_usage(stack: LlamaStack, stream: bool) -> None:
    # /v1/chat/pd_disagg: prefill on the GPU-role server, the slot moved, decode on the CPU-role one.
    rid = f"rec-llama-split-{stream}"
    body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 7, "stream": stream, **SAMPLING,
            **({"stream_options": {"include_usage": True}} if stream else {})}
    with httpx.stream("POST", f"{stack.url}/v1/chat/pd_disagg", json=body, headers={"X-Request-Id": rid},
                      timeout=60) as answer:
        assert answer.status_code == 200, answer.read()
        if stream:
            chunks = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: {")]
            usage = [c["usage"] for c in chunks if c.get("usage")][-1]
        else:
            usage = json.loads(answer.read())["usage"]
    rec = record(stack.socket_path, rid)
    assert rec.decision is not None and rec.decision.mode == "pd_split", rec
    assert (rec.output_tokens, rec.output_tokens_source) == (usage["completion_tokens"], "usage") == (7, "usage")
    assert (rec.prompt_tokens, rec.prompt_tokens_source) == (usage["prompt_tokens"], "usage")
