"""The real llama-server's OpenAI API: chat and completions, streaming and not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from tests.llama._util import GREEDY, NO_EOS, sse_json
from tests.plugins.llama import LlamaServer

pytestmark = pytest.mark.llama

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me about foxes and crows."}
]


@pytest.fixture
async def oai(llama_server: LlamaServer) -> AsyncIterator[AsyncOpenAI]:
    """The official openai client pointed at the server."""
    client = AsyncOpenAI(base_url=llama_server.url + "/v1", api_key="unused", max_retries=0)
    async with client:
        yield client


@pytest.fixture
async def http(llama_server: LlamaServer) -> AsyncIterator[httpx.AsyncClient]:
    """A raw httpx client for the details the openai client hides."""
    async with httpx.AsyncClient(base_url=llama_server.url, timeout=30) as client:
        yield client


async def test_models_lists_the_model_file_with_per_slot_context(
    oai: AsyncOpenAI, http: httpx.AsyncClient, llama_server: LlamaServer
) -> None:
    models = await oai.models.list()
    assert [m.id for m in models.data] == [str(llama_server.model)]
    meta = (await http.get("/v1/models")).json()["data"][0]["meta"]
    assert meta["n_ctx"] == llama_server.n_ctx // llama_server.n_parallel
    assert meta["n_vocab"] == 32000


async def test_chat_non_streaming_reports_length_and_usage(oai: AsyncOpenAI) -> None:
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


async def test_completions_ids_are_chatcmpl_too(oai: AsyncOpenAI) -> None:
    resp = await oai.completions.create(
        model="x", prompt="Once upon a time", max_tokens=5, extra_body={**GREEDY, **NO_EOS}
    )
    # vLLM answers "cmpl-..."; llama-server uses "chatcmpl-" for both routes.
    assert resp.id.startswith("chatcmpl-")
    assert resp.object == "text_completion"
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage is not None and resp.usage.completion_tokens == 5


async def test_model_field_is_ignored_and_echoed_as_the_file(
    oai: AsyncOpenAI, llama_server: LlamaServer
) -> None:
    resp = await oai.chat.completions.create(
        model="no-such-model", messages=MESSAGES, max_tokens=2, extra_body=GREEDY
    )
    assert resp.model == str(llama_server.model)


async def test_chat_stream_matches_non_stream_and_ends_with_done(http: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 12, **GREEDY, **NO_EOS}
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


async def test_chat_stream_usage_comes_in_a_separate_empty_choices_chunk(
    oai: AsyncOpenAI,
) -> None:
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


@pytest.mark.parametrize("include_usage", [True, False])
async def test_completions_stream_always_puts_usage_on_the_finish_chunk(
    http: httpx.AsyncClient, include_usage: bool
) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 3, "stream": True, **GREEDY, **NO_EOS}
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
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
    assert sum(1 for c in chunks if c["choices"][0]["text"]) == 3


async def test_stop_string_gives_stop_and_is_cut_from_the_text(http: httpx.AsyncClient) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 10, **GREEDY, **NO_EOS}
    free = (await http.post("/v1/completions", json=body)).json()["choices"][0]["text"]
    stop = free.strip()[len(free.strip()) // 2 :][:2]
    assert stop, free
    cut = (await http.post("/v1/completions", json={**body, "stop": [stop]})).json()
    choice = cut["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["text"] == free[: free.index(stop)]


async def test_max_tokens_zero_still_generates_one_token(http: httpx.AsyncClient) -> None:
    for limit in ({"max_tokens": 0}, {"n_predict": 0}):
        data = (
            await http.post("/v1/completions", json={"prompt": "hello", **limit, **GREEDY})
        ).json()
        assert data["usage"]["completion_tokens"] == 1, limit
        assert data["choices"][0]["finish_reason"] == "length"


async def test_n_predict_wins_over_max_tokens(http: httpx.AsyncClient) -> None:
    body = {"prompt": "hello", "max_tokens": 6, "n_predict": 2, **GREEDY, **NO_EOS}
    data = (await http.post("/v1/completions", json=body)).json()
    assert data["usage"]["completion_tokens"] == 2


async def test_no_max_tokens_generates_until_the_slot_context_is_full(
    http: httpx.AsyncClient, llama_server: LlamaServer
) -> None:
    data = (await http.post("/v1/completions", json={"prompt": "hi", **GREEDY, **NO_EOS})).json()
    usage = data["usage"]
    assert data["choices"][0]["finish_reason"] == "length"
    assert usage["total_tokens"] == llama_server.n_ctx // llama_server.n_parallel


async def test_n_greater_than_one_returns_several_choices(http: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 3, "n": 2, **NO_EOS}
    data = (await http.post("/v1/chat/completions", json=body)).json()
    assert [c["index"] for c in data["choices"]] == [0, 1]


async def test_repeated_prompt_is_served_from_the_prompt_cache(http: httpx.AsyncClient) -> None:
    body = {"messages": MESSAGES, "max_tokens": 2, **GREEDY}
    first = (await http.post("/v1/chat/completions", json=body)).json()
    second = (await http.post("/v1/chat/completions", json=body)).json()
    n_prompt = first["usage"]["prompt_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == n_prompt - 1
    assert second["timings"]["prompt_n"] == 1
