"""llama-server's OpenAI API, held against the simulator's llama dialect and through syshaxd.

Each test runs its assertions on a real llama-server (the reference), and on the simulator
and/or syshaxd in front of real llama-servers (see tests/plugins/llama_targets.py).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.llama._util import GREEDY, NO_EOS, sse_json
from tests.plugins.llama_targets import ALIAS, ALL, ENGINES, Target, run_on

pytestmark = pytest.mark.llama

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me about foxes and crows."}
]
META_KEYS = {"vocab_type", "n_vocab", "n_ctx", "n_ctx_train", "n_embd", "n_params", "size", "ftype"}


@run_on(*ENGINES)
async def test_models_lists_one_model_with_the_per_slot_context(target: Target) -> None:
    async with target.openai() as oai, target.http() as http:
        models = await oai.models.list()
        data = (await http.get("/v1/models")).json()
    assert [m.id for m in models.data] == [ALIAS]
    card = data["data"][0]
    assert card["owned_by"] == "llamacpp" and card["aliases"] == [ALIAS]
    assert set(card["meta"]) == META_KEYS
    assert card["meta"]["n_ctx"] == target.slot_n_ctx
    assert card["meta"]["n_vocab"] == 32000
    assert [m["model"] for m in data["models"]] == [ALIAS]  # the Ollama-style list


@run_on(*ENGINES)
async def test_a_model_card_has_the_servers_keys(target: Target) -> None:
    async with target.http() as http:
        card = (await http.get("/v1/models")).json()["data"][0]
    assert set(card) == {"id", "aliases", "tags", "object", "created", "owned_by", "meta"}


@run_on(*ALL)
async def test_chat_non_streaming_reports_length_usage_and_timings(target: Target) -> None:
    async with target.openai() as oai:
        resp = await oai.chat.completions.create(
            model="anything", messages=MESSAGES, max_tokens=8, extra_body={**GREEDY, **NO_EOS}
        )
    assert resp.id.startswith("chatcmpl-")
    assert resp.object == "chat.completion"
    choice = resp.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert resp.usage is not None
    assert resp.usage.completion_tokens == 8
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 8
    # llama-server's own extras: the cache hits as an object (never null) and `timings`.
    assert resp.usage.prompt_tokens_details is not None
    assert resp.usage.prompt_tokens_details.cached_tokens is not None
    timings: dict[str, Any] = (resp.model_extra or {})["timings"]
    assert timings["predicted_n"] == 8
    assert timings["prompt_n"] + timings["cache_n"] == resp.usage.prompt_tokens


@run_on(*ALL)
async def test_completions_ids_are_chatcmpl_too(target: Target) -> None:
    async with target.openai() as oai:
        resp = await oai.completions.create(
            model="x", prompt="Once upon a time", max_tokens=5, extra_body={**GREEDY, **NO_EOS}
        )
    # vLLM answers "cmpl-..."; llama-server uses "chatcmpl-" for both routes.
    assert resp.id.startswith("chatcmpl-")
    assert resp.object == "text_completion"
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage is not None and resp.usage.completion_tokens == 5


@run_on(*ALL)
async def test_model_field_is_ignored_and_the_server_answers_with_its_alias(target: Target) -> None:
    async with target.openai() as oai:
        resp = await oai.chat.completions.create(
            model="no-such-model", messages=MESSAGES, max_tokens=2, extra_body=GREEDY
        )
        stream = await oai.chat.completions.create(
            model="no-such-model", messages=MESSAGES, max_tokens=2, stream=True, extra_body=GREEDY
        )
        streamed = {chunk.model async for chunk in stream}
    assert resp.model in target.models
    assert len(streamed) == 1 and streamed <= target.models


@run_on(*ALL)
async def test_chat_stream_matches_non_stream_and_ends_with_done(target: Target) -> None:
    body = {"model": "x", "messages": MESSAGES, "max_tokens": 12, **GREEDY, **NO_EOS}
    async with target.http() as http:
        whole = (await http.post("/v1/chat/completions", json=body)).json()
        raw = (await http.post("/v1/chat/completions", json={**body, "stream": True})).text
    chunks, done = sse_json(raw)
    assert done
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["choices"][0]["delta"] == {}
    # Without stream_options there is no usage anywhere, but the last chunk has timings.
    assert all("usage" not in c for c in chunks)
    assert last["timings"]["predicted_n"] == 12


@run_on(*ALL)
async def test_chat_stream_usage_comes_in_a_separate_empty_choices_chunk(target: Target) -> None:
    async with target.openai() as oai:
        stream = await oai.chat.completions.create(
            model="x",
            messages=MESSAGES,
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={**GREEDY, **NO_EOS},
        )
        chunks = [c async for c in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert chunks[-2].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks[:-1])


@run_on(*ALL)
@pytest.mark.parametrize("include_usage", [True, False])
async def test_completions_stream_always_puts_usage_on_the_finish_chunk(
    target: Target, include_usage: bool
) -> None:
    body = {"model": "x", "prompt": "Once upon a time", "max_tokens": 3, "stream": True, **GREEDY, **NO_EOS}
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    async with target.http() as http:
        raw = (await http.post("/v1/completions", json={**body, **options})).text
    chunks, done = sse_json(raw)
    assert done
    assert all(c["object"] == "text_completion" for c in chunks)
    last = chunks[-1]
    # Unlike chat: no separate usage chunk; the finish chunk (empty text) carries usage,
    # whether or not stream_options asked for it.
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["choices"][0]["text"] == ""
    assert last["usage"]["completion_tokens"] == 3
    assert "".join(c["choices"][0]["text"] for c in chunks)


# One event per token is what syshaxd counts as generated tokens of a stream it relays
# (dispatch.py, `_relay`); the simulator sends one chunk per token however late it runs.
@run_on(*ALL)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_a_stream_sends_one_chunk_per_token(target: Target, path: str) -> None:
    body = {"model": "x", "max_tokens": 24, "stream": True, **GREEDY, **NO_EOS,
            **({"messages": MESSAGES} if "chat" in path else {"prompt": "Once upon a time"})}
    async with target.http() as http:
        raw = (await http.post(path, json=body)).text
    chunks, done = sse_json(raw)
    assert done
    texts = [c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content") for c in chunks]
    assert sum(1 for text in texts if text) == 24


# syshaxd assembles the non-streamed answer from llama-server's stream, so the cut text
# must survive that.
@run_on(*ALL)
async def test_stop_string_gives_stop_and_is_cut_from_the_text(target: Target) -> None:
    body = {"model": "x", "prompt": "Once upon a time", "max_tokens": 10, **GREEDY, **NO_EOS}
    async with target.http() as http:
        free = (await http.post("/v1/completions", json=body)).json()["choices"][0]["text"]
        stop = free.strip()[len(free.strip()) // 2 :][:2]
        assert stop, free
        cut = (await http.post("/v1/completions", json={**body, "stop": [stop]})).json()
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == free[: free.index(stop)]


@run_on(*ALL)
async def test_a_streamed_answer_never_shows_the_stop_string(target: Target) -> None:
    body = {"model": "x", "prompt": "Once upon a time", "max_tokens": 10, **GREEDY, **NO_EOS}
    async with target.http() as http:
        free = (await http.post("/v1/completions", json=body)).json()["choices"][0]["text"]
        stop = free.strip()[len(free.strip()) // 2 :][:2]
        raw = (await http.post("/v1/completions", json={**body, "stop": [stop], "stream": True})).text
    chunks, done = sse_json(raw)
    assert done
    *tokens, last = chunks
    # Text that may begin the stop string is held back, never sent and then taken back.
    assert "".join(c["choices"][0]["text"] for c in tokens) == free[: free.index(stop)]
    assert last["choices"][0]["finish_reason"] == "stop"
    # Still one chunk per token, also for a token whose text was held back.
    assert len(tokens) == last["usage"]["completion_tokens"]


# syshaxd refuses max_tokens 0 itself (tests/edge/test_conductor_api.py).
@run_on(*ENGINES)
async def test_max_tokens_zero_still_generates_one_token(target: Target) -> None:
    async with target.http() as http:
        for limit in ({"max_tokens": 0}, {"n_predict": 0}):
            data = (
                await http.post("/v1/completions", json={"prompt": "hello", **limit, **GREEDY})
            ).json()
            assert data["usage"]["completion_tokens"] == 1, limit
            assert data["choices"][0]["finish_reason"] == "length"


@run_on(*ALL)
async def test_n_predict_wins_over_max_tokens(target: Target) -> None:
    body = {"model": "x", "prompt": "hello", "max_tokens": 6, "n_predict": 2, **GREEDY, **NO_EOS}
    async with target.http() as http:
        data = (await http.post("/v1/completions", json=body)).json()
    assert data["usage"]["completion_tokens"] == 2


# syshaxd fills in its configured max_tokens when a request has none.
@run_on(*ENGINES)
async def test_no_max_tokens_generates_until_the_slot_context_is_full(target: Target) -> None:
    async with target.http() as http:
        data = (await http.post("/v1/completions", json={"prompt": "hi", **GREEDY, **NO_EOS})).json()
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["total_tokens"] == target.slot_n_ctx


# Through syshaxd a repeat may go to the other server, whose cache never saw the prompt.
@run_on(*ENGINES)
async def test_repeated_prompt_is_served_from_the_prompt_cache(target: Target) -> None:
    # A prompt no other test sends: the module's tests share their engines.
    body = {"messages": [{"role": "user", "content": "Which birds cache food for the winter?"}],
            "max_tokens": 2, **GREEDY}
    async with target.http() as http:
        first = (await http.post("/v1/chat/completions", json=body)).json()
        second = (await http.post("/v1/chat/completions", json=body)).json()
    n_prompt = first["usage"]["prompt_tokens"]
    # The first may reuse a chat template's head another test's prompt left in a slot, never the question.
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < n_prompt // 2
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt - 1
    assert second["timings"]["prompt_n"] == 1


# Several choices: each runs in a slot of its own and is reported apart (docs/llama.md). syshaxd
# sums the reports (tests/records); here the simulator must report them as the server does.
@run_on(*ENGINES)
async def test_n_choices_are_reported_one_by_one(target: Target) -> None:
    body = {"model": "x", "max_tokens": 3, "n": 2, **GREEDY, **NO_EOS}
    chat = {**body, "messages": MESSAGES}

    async def post(path: str, payload: dict[str, Any]) -> httpx.Response:
        # A connection of its own each: llama-server closes one idle past its keep-alive (a
        # stalled machine reused a closed one here once).
        async with target.http() as http:
            return await http.post(path, json=payload)

    whole = (await post("/v1/chat/completions", chat)).json()
    streamed, done = sse_json((await post("/v1/chat/completions", {
        **chat, "stream": True, "stream_options": {"include_usage": True}})).text)
    completion, completion_done = sse_json((await post("/v1/completions", {
        **body, "prompt": "Once upon a time", "stream": True})).text)
    refused = await post("/v1/chat/completions", {**chat, "n": target.n_parallel + 1})
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    assert whole["usage"]["completion_tokens"] == 3  # one choice's, not the 6 of both
    assert whole["timings"]["predicted_n"] == 3
    assert done and completion_done
    # Chat: each choice opens with its own role chunk and is followed by a usage chunk of its own.
    roles = [c["choices"][0]["index"] for c in streamed if c["choices"] and "role" in c["choices"][0]["delta"]]
    assert sorted(roles) == [0, 1]
    usages = [c["usage"]["completion_tokens"] for c in streamed if not c["choices"]]
    assert usages == [3, 3]
    ends = [i for i, c in enumerate(streamed) if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [i + 1 for i in ends] == [i for i, c in enumerate(streamed) if not c["choices"]]
    # Completions: each choice's last chunk carries its usage.
    finished = [c for c in completion if c["choices"][0]["finish_reason"]]
    assert sorted(c["choices"][0]["index"] for c in finished) == [0, 1]
    assert [c["usage"]["completion_tokens"] for c in finished] == [3, 3]
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (f"Field 'n': Value must be between 1 <= value <= "
                                                  f"{target.n_parallel}, but got {target.n_parallel + 1}")
