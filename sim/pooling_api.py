"""vLLM's pooling routes: ``/v1/embeddings``, ``/score`` (``/v1/score``), ``/rerank`` (``/v1``, ``/v2``).

Request and response shapes are vLLM's (``protocol.py``: ``EmbeddingResponse``,
``ScoreResponse``, ``RerankResponse``; ids ``embd-``, ``score-``, ``rerank-``). The
numbers are :mod:`sim.vectors`' stand-ins: an embedding has the profile's hidden size
and unit length, ``encoding_format: "base64"`` packs it as little-endian float32 as
vLLM does; ``dimensions`` is refused, as vLLM refuses it for a model without Matryoshka
embeddings. A real vLLM answers these only when its model is a pooling model; the
simulator answers them all.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from sim.api_format import usage
from sim.api_request import ApiError, bool_field, parse_messages, requested_model
from sim.textgen import count_tokens
from sim.tokenizer import VLLM_VOCAB, encode, encode_chat
from sim.vectors import embedding, relevance


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def _inputs(body: dict[str, Any]) -> list[list[int]]:
    """The token ids of every input: ``input`` (a string, strings, ids, lists of ids) or a chat's ``messages``."""
    if "messages" in body and "input" not in body:
        messages = parse_messages(body, llama=False)
        chat = encode_chat(messages, bool_field(body, "add_generation_prompt", False), VLLM_VOCAB)
        return [[t for t, _ in chat]]
    value = body.get("input")
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and value:
        if _is_ids(value):
            return [value]
        if all(isinstance(v, str) for v in value):
            return [[t for t, _ in encode(v, VLLM_VOCAB)] for v in value]
        if all(_is_ids(v) for v in value):
            return list(value)
    raise ApiError("input: Input should be a string, a list of strings, a list of token ids or a list of lists of "
                   "token ids (not empty)", param="input")


def _vector(values: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "float":
        return values
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def embeddings(body: dict[str, Any], *, served_model: str, max_model_len: int, dimensions: int, request_id: str,
               created: int) -> dict[str, Any]:
    """vLLM's ``EmbeddingResponse`` for one request body."""
    requested_model(body, served_model, check_model=True)
    encoding_format = body.get("encoding_format") or "float"
    if encoding_format not in ("float", "base64"):
        raise ApiError("encoding_format: Input should be 'float' or 'base64'", param="encoding_format")
    if body.get("dimensions") is not None:
        raise ApiError(f'Model "{served_model}" does not support matryoshka representation, changing output '
                       "dimensions will lead to poor results.")
    inputs = _inputs(body)
    for ids in inputs:
        if len(ids) > max_model_len:
            raise ApiError(f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                           f"{len(ids)} tokens in the input for embedding generation. Please reduce the length of "
                           "the input.")
    data = [{"index": i, "object": "embedding", "embedding": _vector(embedding(ids, dimensions), encoding_format)}
            for i, ids in enumerate(inputs)]
    tokens = sum(len(ids) for ids in inputs)
    return {"id": f"embd-{request_id}", "object": "list", "created": created, "model": served_model, "data": data,
            "usage": usage(tokens, 0)}


def _texts(body: dict[str, Any], name: str) -> list[str]:
    value = body.get(name)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ApiError(f"{name}: Input should be a string or a list of strings", param=name)


def _pairs(texts_1: list[str], texts_2: list[str]) -> list[tuple[str, str]]:
    """vLLM's score pairing: 1:1, 1:N or N:N."""
    if len(texts_1) > 1 and len(texts_1) != len(texts_2):
        raise ApiError("Input lengths must be either 1:1, 1:N or N:N")
    if not texts_1:
        raise ApiError("At least one text element must be given")
    if not texts_2:
        raise ApiError("At least one text_pair element must be given")
    if len(texts_1) == 1:
        texts_1 = texts_1 * len(texts_2)
    return list(zip(texts_1, texts_2, strict=True))


def score(body: dict[str, Any], *, served_model: str, request_id: str, created: int) -> dict[str, Any]:
    """vLLM's ``ScoreResponse``: one score per (``text_1``, ``text_2``) pair."""
    requested_model(body, served_model, check_model=True)
    pairs = _pairs(_texts(body, "text_1"), _texts(body, "text_2"))
    data = [{"index": i, "object": "score", "score": relevance(a, b)} for i, (a, b) in enumerate(pairs)]
    tokens = sum(count_tokens(a) + count_tokens(b) for a, b in pairs)
    return {"id": f"score-{request_id}", "object": "list", "created": created, "model": served_model, "data": data,
            "usage": usage(tokens, 0)}


def rerank(body: dict[str, Any], *, served_model: str, request_id: str) -> dict[str, Any]:
    """vLLM's ``RerankResponse``: the ``documents`` by relevance to ``query``, best first, ``top_n`` of them."""
    requested_model(body, served_model, check_model=True)
    query = body.get("query")
    if not isinstance(query, str):
        raise ApiError("query: Input should be a valid string", param="query")
    documents = _texts(body, "documents")
    top_n = body.get("top_n") or 0
    if not isinstance(top_n, int) or isinstance(top_n, bool):
        raise ApiError("top_n: Input should be a valid integer", param="top_n")
    ranked = sorted(((relevance(query, doc), i, doc) for i, doc in enumerate(documents)), key=lambda r: -r[0])
    if 0 < top_n < len(documents):
        ranked = ranked[:top_n]
    results = [{"index": i, "document": {"text": doc, "multi_modal": None}, "relevance_score": value}
               for value, i, doc in ranked]
    tokens = sum(count_tokens(query) + count_tokens(doc) for doc in documents)
    return {"id": f"rerank-{request_id}", "model": served_model, "usage": {"total_tokens": tokens},
            "results": results}
