"""/tokenize and /detokenize against real simulator processes, vLLM's and llama-server's shapes; the stand-in ids."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from sim import textgen
from sim.launch import EngineHandle, start_engine
from sim.tokenizer import VLLM_VOCAB, decode, encode, encode_chat, llama_vocab

PROMPT = "Tell me about rivers, please."


@pytest.fixture(scope="module")
def vllm() -> Iterator[EngineHandle]:
    with start_engine("tiny", speed=50.0) as (_, handle):
        yield handle


@pytest.fixture(scope="module")
def llama() -> Iterator[EngineHandle]:
    with start_engine("tiny", speed=50.0, dialect="llamacpp") as (_, handle):
        yield handle


@pytest.mark.parametrize("text", [PROMPT, "hello  world\n\nagain", "日本語 and ascii", "", "supercalifragilistic"])
def test_a_text_has_as_many_ids_as_the_stand_in_counts_tokens(text: str) -> None:
    for vocab in (VLLM_VOCAB, llama_vocab(32000)):
        ids = encode(text, vocab)
        assert len(ids) == textgen.count_tokens(text)
        assert all(0 <= t < vocab.size and t not in vocab.specials for t, _ in ids)


def test_generated_text_survives_tokenize_and_detokenize() -> None:
    answer = textgen.generate(textgen.request_key("some prompt", 7), 0, 40)
    for vocab in (VLLM_VOCAB, llama_vocab(32000)):
        assert decode([t for t, _ in encode(answer, vocab)], vocab) == (answer, None)


def test_a_chat_is_chatml_with_the_template_tokens_the_stand_in_counts() -> None:
    messages = [("system", "be brief"), ("user", PROMPT)]
    ids = [t for t, _ in encode_chat(messages, True, VLLM_VOCAB)]
    assert len(ids) == textgen.chat_tokens([c for _, c in messages])
    text, _ = decode(ids, VLLM_VOCAB)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_vllm_tokenize_a_prompt(vllm: EngineHandle) -> None:
    r = httpx.post(f"{vllm.url}/tokenize", json={"model": "ds-32b", "prompt": PROMPT})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["count", "max_model_len", "tokens", "token_strs"]
    assert body["count"] == len(body["tokens"]) == textgen.count_tokens(PROMPT)
    assert body["max_model_len"] == 2048 and body["token_strs"] is None
    strs = httpx.post(f"{vllm.url}/tokenize", json={"prompt": PROMPT, "return_token_strs": True}).json()["token_strs"]
    assert "".join(strs) == PROMPT


def test_vllm_tokenize_a_chat_counts_what_the_chat_completion_counts(vllm: EngineHandle) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    count = httpx.post(f"{vllm.url}/tokenize", json={"messages": messages}).json()["count"]
    chat = httpx.post(f"{vllm.url}/v1/chat/completions", json={"messages": messages, "max_tokens": 1}).json()
    assert count == chat["usage"]["prompt_tokens"]
    without = httpx.post(f"{vllm.url}/tokenize", json={"messages": messages, "add_generation_prompt": False}).json()
    assert without["count"] == count - 2


def test_vllm_detokenize_gives_the_prompt_back(vllm: EngineHandle) -> None:
    answer = httpx.post(f"{vllm.url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 12,
                                                            "ignore_eos": True}).json()["choices"][0]["text"]
    tokens = httpx.post(f"{vllm.url}/tokenize", json={"prompt": answer}).json()["tokens"]
    assert httpx.post(f"{vllm.url}/detokenize", json={"tokens": tokens}).json() == {"prompt": answer}


def test_vllm_tokenize_errors(vllm: EngineHandle) -> None:
    r = httpx.post(f"{vllm.url}/tokenize", json={"model": "gpt-4", "prompt": "x"})
    assert r.status_code == 404 and r.json()["error"]["type"] == "NotFoundError"
    r = httpx.post(f"{vllm.url}/detokenize", json={"tokens": "abc"})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    r = httpx.post(f"{vllm.url}/tokenize", json={"messages": [{"role": "user", "content": "x"}],
                                                 "continue_final_message": True})
    assert r.status_code == 400 and "continue_final_message" in r.json()["error"]["message"]


def test_llama_tokenize_and_detokenize(llama: EngineHandle) -> None:
    tokens = httpx.post(f"{llama.url}/tokenize", json={"content": PROMPT}).json()
    assert list(tokens) == ["tokens"] and len(tokens["tokens"]) == textgen.count_tokens(PROMPT)
    special = httpx.post(f"{llama.url}/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"]
    assert special == [1, *tokens["tokens"]]
    pieces = httpx.post(f"{llama.url}/tokenize", json={"content": "river stone", "with_pieces": True}).json()
    assert [p["piece"] for p in pieces["tokens"]] == ["river", " stone"]
    assert httpx.post(f"{llama.url}/tokenize", json={}).json() == {"tokens": []}
    back = httpx.post(f"{llama.url}/detokenize", json={"tokens": [1, *[p["id"] for p in pieces["tokens"]]]}).json()
    assert back == {"content": "<s>river stone"}


def test_llama_detokenize_of_an_unknown_id_is_its_500(llama: EngineHandle) -> None:
    r = httpx.post(f"{llama.url}/detokenize", json={"tokens": [5, 99999999]})
    assert r.status_code == 500
    assert r.json() == {"error": {"code": 500, "type": "server_error", "message":
                                  "vector::_M_range_check: __n (which is 99999999) >= this->size() (which is 32000)"}}
    r = httpx.post(f"{llama.url}/tokenize", json={"content": 5})
    assert r.status_code == 500 and "type must be string, but is number" in r.json()["error"]["message"]
