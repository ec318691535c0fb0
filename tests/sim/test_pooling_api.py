"""/v1/embeddings, /score and /rerank against real simulator processes: vLLM's shapes, deterministic numbers."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator

import httpx
import openai
import pytest

from sim import textgen
from sim.launch import EngineHandle, start_engine

DIM = 1024  # the tiny profile's hidden size


@pytest.fixture(scope="module")
def v0() -> Iterator[EngineHandle]:
    with start_engine("tiny", speed=50.0, dialect="vllm-v0") as (_, handle):
        yield handle


def test_embeddings_with_the_openai_client_are_unit_vectors_and_deterministic(client: openai.OpenAI) -> None:
    texts = ["the river runs", "a stone on the hill"]
    first = client.embeddings.create(model="ds-32b", input=texts)  # the client asks for base64 and decodes it
    again = client.embeddings.create(model="ds-32b", input=texts, encoding_format="float")
    assert first.model == "ds-32b" and first.object == "list"
    assert [d.index for d in first.data] == [0, 1]
    for a, b in zip(first.data, again.data, strict=True):
        assert len(a.embedding) == DIM
        assert math.isclose(sum(x * x for x in a.embedding), 1.0, rel_tol=1e-5)
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
    assert first.data[0].embedding != pytest.approx(first.data[1].embedding, abs=1e-3)
    tokens = sum(textgen.count_tokens(t) for t in texts)
    assert first.usage.prompt_tokens == first.usage.total_tokens == tokens


def test_embeddings_raw_shape_and_base64_is_little_endian_float32(engine: EngineHandle) -> None:
    url = f"{engine.url}/v1/embeddings"
    floats = httpx.post(url, json={"input": "hello there"}, headers={"X-Request-Id": "abc"}).json()
    assert list(floats) == ["id", "object", "created", "model", "data", "usage"]
    assert floats["id"] == "embd-abc"
    assert floats["data"][0].keys() == {"index", "object", "embedding"} and floats["data"][0]["object"] == "embedding"
    assert floats["usage"] == {"prompt_tokens": 2, "total_tokens": 2, "completion_tokens": 0,
                               "prompt_tokens_details": None}
    packed = httpx.post(url, json={"input": "hello there", "encoding_format": "base64"}).json()["data"][0]["embedding"]
    raw = base64.b64decode(packed)
    assert len(raw) == 4 * DIM
    assert list(struct.unpack(f"<{DIM}f", raw)) == pytest.approx(floats["data"][0]["embedding"], abs=1e-6)


def test_embeddings_of_token_ids_match_the_text_they_tokenize_to(engine: EngineHandle) -> None:
    text = "rivers and stones"
    ids = httpx.post(f"{engine.url}/tokenize", json={"prompt": text}).json()["tokens"]
    url = f"{engine.url}/v1/embeddings"
    by_text = httpx.post(url, json={"input": text}).json()["data"][0]["embedding"]
    by_ids = httpx.post(url, json={"input": ids}).json()
    assert by_ids["data"][0]["embedding"] == by_text
    several = httpx.post(url, json={"input": [ids, ids[:1]]}).json()
    assert len(several["data"]) == 2 and several["usage"]["prompt_tokens"] == len(ids) + 1


@pytest.mark.parametrize("body,status,needle", [
    ({"input": "x", "model": "gpt-4"}, 404, "does not exist"),
    ({"input": "x", "dimensions": 64}, 400, "matryoshka"),
    ({"input": "x", "encoding_format": "hex"}, 400, "encoding_format"),
    ({"input": []}, 400, "input"),
    ({"input": "word " * 3000}, 400, "maximum context length"),
])
def test_embedding_errors_are_vllms(engine: EngineHandle, body: dict[str, object], status: int, needle: str) -> None:
    r = httpx.post(f"{engine.url}/v1/embeddings", json=body)
    assert r.status_code == status
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    assert needle in error["message"]


def test_unknown_model_in_vllm_v0_is_the_old_error_object(v0: EngineHandle) -> None:
    for path, body in [("/v1/embeddings", {"input": "x"}), ("/rerank", {"query": "a", "documents": ["b"]}),
                       ("/score", {"text_1": "a", "text_2": "b"}), ("/tokenize", {"prompt": "x"})]:
        r = httpx.post(f"{v0.url}{path}", json={**body, "model": "gpt-4"})
        assert r.status_code == 404
        assert r.json()["object"] == "error" and r.json()["type"] == "NotFoundError", path


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_rerank_puts_the_document_with_the_querys_words_first(engine: EngineHandle, path: str) -> None:
    docs = ["nothing to see", "the river by the stone", "a river"]
    r = httpx.post(f"{engine.url}{path}", json={"model": "ds-32b", "query": "river stone", "documents": docs})
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["id", "model", "usage", "results"] and body["id"].startswith("rerank-")
    assert [x["index"] for x in body["results"]] == [1, 2, 0]
    assert body["results"][0]["document"] == {"text": docs[1], "multi_modal": None}
    scores = [x["relevance_score"] for x in body["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert body["usage"] == {"total_tokens": sum(textgen.count_tokens("river stone") + textgen.count_tokens(d)
                                                 for d in docs)}
    top = httpx.post(f"{engine.url}{path}", json={"query": "river stone", "documents": docs, "top_n": 1}).json()
    assert top["results"] == body["results"][:1]


@pytest.mark.parametrize("path", ["/score", "/v1/score"])
def test_score_pairs_one_to_n_and_n_to_n(engine: EngineHandle, path: str) -> None:
    one_to_n = httpx.post(f"{engine.url}{path}", json={"text_1": "river", "text_2": ["a river", "a hill"]}).json()
    assert list(one_to_n) == ["id", "object", "created", "model", "data", "usage"]
    assert one_to_n["id"].startswith("score-") and one_to_n["object"] == "list"
    assert [d["object"] for d in one_to_n["data"]] == ["score", "score"]
    assert one_to_n["data"][0]["score"] > one_to_n["data"][1]["score"]
    n_to_n = httpx.post(f"{engine.url}{path}", json={"text_1": ["river", "hill"], "text_2": ["a river", "a hill"]})
    assert n_to_n.json()["data"][0]["score"] == one_to_n["data"][0]["score"]
    bad = httpx.post(f"{engine.url}{path}", json={"text_1": ["a", "b"], "text_2": ["a", "b", "c"]})
    assert bad.status_code == 400 and "1:1, 1:N or N:N" in bad.json()["error"]["message"]


def test_llamacpp_embeddings_and_rerank_are_501_as_without_their_flags(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", dialect="llamacpp")
    r = httpx.post(f"{engine.url}/v1/embeddings", json={"input": "x"})
    assert r.status_code == 501
    assert r.json() == {"error": {"code": 501, "type": "not_supported_error",
                                  "message": "This server does not support embeddings. Start it with `--embeddings`"}}
    r = httpx.post(f"{engine.url}/v1/rerank", json={"query": "x", "documents": ["y"]})
    assert r.status_code == 501 and "--reranking" in r.json()["error"]["message"]
    assert httpx.post(f"{engine.url}/v1/score", json={}).status_code == 404
