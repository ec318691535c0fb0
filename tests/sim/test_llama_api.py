"""The simulator's llamacpp dialect answers like the real llama-server (docs/llama.md, "Behaviour")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from syshaxd.sse import Decoder

CHAT = {"messages": [{"role": "user", "content": "tell me about the river"}], "ignore_eos": True}


@pytest.fixture
def llama(sim_engine: Any, tmp_path: Path) -> Any:
    """A tiny llamacpp engine: 2 slots of 128 tokens, slot files in tmp_path."""
    return sim_engine("tiny", dialect="llamacpp", parallel=2, slot_save_path=tmp_path, ctx_size=256)


def _post(engine: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{engine.url}{path}", json=body, timeout=30)


def _events(resp: httpx.Response) -> list[Any]:
    return [e.json() if not e.done else "[DONE]" for e in Decoder(strict=True).feed(resp.content)]


def test_answers_have_llama_servers_keys_ids_usage_and_timings(llama: Any) -> None:
    chat = _post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 5}).json()
    assert set(chat) == {"choices", "created", "model", "system_fingerprint", "object", "usage", "id", "timings"}
    assert set(chat["choices"][0]) == {"finish_reason", "index", "message"}
    assert chat["system_fingerprint"].startswith("b")
    usage, timings = chat["usage"], chat["timings"]
    assert usage["completion_tokens"] == 5 and isinstance(usage["prompt_tokens_details"]["cached_tokens"], int)
    assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
    assert timings["predicted_n"] == 5
    text = _post(llama, "/v1/completions", {"prompt": "once upon a time", "max_tokens": 3}).json()
    assert text["id"].startswith("chatcmpl-") and text["object"] == "text_completion"
    assert set(text["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}


def test_a_repeated_prompt_comes_from_the_slot_cache(llama: Any) -> None:
    first = _post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 4}).json()
    again = _post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 4}).json()
    prompt = first["usage"]["prompt_tokens"]
    assert first["timings"]["prompt_n"] == prompt
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt - 1
    assert again["timings"]["prompt_n"] == 1
    assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_chat_and_completion_streams_are_shaped_like_llama_servers(llama: Any) -> None:
    chat = _events(_post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 3, "stream": True,
                                                         "stream_options": {"include_usage": True}}))
    assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chat[-1] == "[DONE]"
    usage_chunk, last = chat[-2], chat[-3]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 3 and "timings" in usage_chunk
    assert last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"] == "length"
    assert last["timings"]["predicted_n"] == 3
    assert all("logprobs" not in c["choices"][0] and "usage" not in c for c in chat[:-2])
    text = _events(_post(llama, "/v1/completions", {"prompt": "once", "max_tokens": 3, "stream": True}))
    final = text[-2]
    assert final["choices"][0]["text"] == "" and final["choices"][0]["finish_reason"] == "length"
    assert final["usage"]["completion_tokens"] == 3 and "timings" in final  # usage without include_usage
    assert all(c["choices"] for c in text[:-1])  # no separate usage chunk


def test_length_limits_follow_the_slot_context(llama: Any) -> None:
    zero = _post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 0}).json()
    assert zero["usage"]["completion_tokens"] == 1 and zero["choices"][0]["finish_reason"] == "length"
    unlimited = _post(llama, "/v1/chat/completions", CHAT).json()
    assert unlimited["usage"]["total_tokens"] == 128 and unlimited["choices"][0]["finish_reason"] == "length"
    more = _post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 5000, "n_predict": 2}).json()
    assert more["usage"]["completion_tokens"] == 2  # n_predict wins over max_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_slot_context_is_refused_up_front(llama: Any, stream: bool) -> None:
    long_prompt = " ".join(["river"] * 200)
    resp = _post(llama, "/v1/completions", {"prompt": long_prompt, "max_tokens": 1, "stream": stream})
    assert resp.status_code == 400 and resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == 128 and error["n_prompt_tokens"] == 200


def test_slots_and_slot_actions_answer_like_llama_server(llama: Any) -> None:
    assert _post(llama, "/v1/chat/completions", {**CHAT, "max_tokens": 2, "id_slot": 99}).status_code == 200
    slots = httpx.get(f"{llama.url}/slots").json()
    used = [s for s in slots if "id_task" in s]
    assert len(used) == 1 and used[0]["next_token"][0]["n_decoded"] == 0
    assert [set(s) for s in slots if s not in used] == [{"id", "n_ctx", "speculative", "is_processing"}]
    bad = httpx.post(f"{llama.url}/slots/0?action=save", content=b"{not json", timeout=10)
    assert bad.status_code == 500 and bad.json()["error"]["type"] == "server_error"
    missing = httpx.post(f"{llama.url}/slots/0?action=save", json={}, timeout=10)
    assert missing.status_code == 500 and "filename" in missing.json()["error"]["message"]


def test_request_errors_are_llama_servers(llama: Any) -> None:
    broken = httpx.post(f"{llama.url}/v1/chat/completions", content=b"{\"messages\": [", timeout=10)
    assert broken.status_code == 500 and broken.json()["error"]["type"] == "server_error"
    assert "parse_error" in broken.json()["error"]["message"]
    missing = _post(llama, "/v1/chat/completions", {"max_tokens": 1})
    assert missing.status_code == 400 and missing.json()["error"]["message"] == "'messages' is required"
    array = httpx.post(f"{llama.url}/v1/chat/completions", json=[1, 2], timeout=10)
    assert array.status_code == 400 and array.json()["error"]["message"] == "'messages' is required"
    for resp in (httpx.get(f"{llama.url}/nowhere"), httpx.get(f"{llama.url}/v1/chat/completions")):
        assert resp.status_code == 404
        assert resp.json() == {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}


async def test_a_deferred_stream_gets_its_headers_with_its_first_token(sim_engine: Any) -> None:
    import asyncio

    engine = sim_engine("tiny", dialect="llamacpp", parallel=1, speed=1.0)
    body = {**CHAT, "stream": True}
    async with httpx.AsyncClient(base_url=engine.url, timeout=30) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body) as first:
            assert first.status_code == 200
            lines = first.aiter_lines()
            await lines.__anext__()  # the one slot is generating
            request = client.build_request("POST", "/v1/chat/completions", json={**body, "max_tokens": 2})
            second = asyncio.ensure_future(client.send(request, stream=True))  # returns with the headers
            done, _ = await asyncio.wait({second}, timeout=0.5)
            assert not done, "headers were sent before the deferred request had a token"
            metrics = (await client.get("/metrics")).text
            assert "llamacpp:requests_deferred 1" in metrics
        # closing the first stream cancels it; the slot frees and the second one starts
        answer = await second
        text = (await answer.aread()).decode()
        await answer.aclose()
    assert answer.status_code == 200 and text.rstrip().endswith("data: [DONE]")
