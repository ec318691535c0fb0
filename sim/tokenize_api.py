"""``POST /tokenize`` and ``POST /detokenize`` bodies, as vLLM and llama-server answer them.

vLLM (``serving_tokenization.py``): a ``prompt`` or a chat's ``messages`` (with
``add_generation_prompt``, ``continue_final_message``) gives ``{count, max_model_len,
tokens, token_strs}`` (``token_strs`` only with ``return_token_strs``); ``{"tokens":
[...]}`` gives ``{"prompt": text}``. llama-server: ``{"content", "add_special",
"with_pieces"}`` gives ``{"tokens": [...]}`` (with pieces: ``[{"id", "piece"}]``);
``{"tokens": [...]}`` gives ``{"content": text}``; its type errors and an id outside the
vocabulary are 500s with the C++ library's message. Ids come from :mod:`sim.tokenizer`.
"""

from __future__ import annotations

from typing import Any

from sim.api_request import (
    ApiError,
    bool_field,
    json_type,
    parse_messages,
    requested_model,
    str_field,
)
from sim.tokenizer import VLLM_VOCAB, Vocab, decode, encode, encode_chat


def vllm_tokenize(body: dict[str, Any], served_model: str, max_model_len: int) -> dict[str, Any]:
    """vLLM's ``TokenizeResponse`` for a completion (``prompt``) or chat (``messages``) request."""
    requested_model(body, served_model, check_model=True)
    if "messages" in body:
        messages = parse_messages(body, llama=False)
        add_generation_prompt = bool_field(body, "add_generation_prompt", True)
        if bool_field(body, "continue_final_message", False) and add_generation_prompt:
            raise ApiError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        tokens = encode_chat(messages, add_generation_prompt, VLLM_VOCAB)
    else:
        prompt = str_field(body, "prompt")
        if prompt is None:
            raise ApiError("prompt: Field required (or messages)", param="prompt")
        tokens = encode(prompt, VLLM_VOCAB)
    strs = [piece for _, piece in tokens] if bool_field(body, "return_token_strs", False) else None
    return {"count": len(tokens), "max_model_len": max_model_len, "tokens": [t for t, _ in tokens],
            "token_strs": strs}


def _token_ids(body: dict[str, Any]) -> list[int]:
    tokens = body.get("tokens")
    if not isinstance(tokens, list):
        raise ApiError("tokens: Field required (a list of token ids)", param="tokens")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ApiError("tokens: Input should be a list of integers", param="tokens")
    return tokens


def vllm_detokenize(body: dict[str, Any], served_model: str) -> dict[str, Any]:
    """vLLM's ``DetokenizeResponse``: the text of the ids (ids the tokenizer does not know add nothing)."""
    requested_model(body, served_model, check_model=True)
    text = "".join(VLLM_VOCAB.piece_text(t) or "" for t in _token_ids(body))
    return {"prompt": text}


def _type_error(expected: str, value: object) -> ApiError:
    return ApiError(f"[json.exception.type_error.302] type must be {expected}, but is {json_type(value)}", 500,
                    "server_error")


def llama_tokenize(body: dict[str, Any], vocab: Vocab) -> dict[str, Any]:
    """llama-server's ``/tokenize``: ``content`` (a string, or a list of strings and ids) into ids."""
    content = body.get("content", "")
    if not isinstance(content, (str, list)):
        raise _type_error("string", content)
    items = content if isinstance(content, list) else [content]
    tokens: list[tuple[int, str]] = []
    if body.get("add_special") is True and vocab.bos is not None:
        tokens.append((vocab.bos, vocab.specials[vocab.bos]))
    for item in items:
        if isinstance(item, str):
            tokens += encode(item, vocab)
        elif isinstance(item, int) and not isinstance(item, bool):
            tokens.append((item, vocab.piece_text(item) or ""))
        else:
            raise _type_error("string", item)
    if body.get("with_pieces") is True:
        return {"tokens": [{"id": t, "piece": piece} for t, piece in tokens]}
    return {"tokens": [t for t, _ in tokens]}


def llama_detokenize(body: dict[str, Any], vocab: Vocab) -> dict[str, Any]:
    """llama-server's ``/detokenize``: ``{"content": text}``; an unknown id is a 500, as on the real server."""
    tokens = body.get("tokens", [])
    if not isinstance(tokens, list):
        raise _type_error("array", tokens)
    for t in tokens:
        if not isinstance(t, int) or isinstance(t, bool):
            raise _type_error("number", t)
    text, bad = decode(tokens, vocab)
    if bad is not None:
        raise ApiError(f"vector::_M_range_check: __n (which is {bad % 2**64}) >= this->size() (which is "
                       f"{vocab.size})", 500, "server_error")
    return {"content": text}
