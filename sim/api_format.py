"""Response bodies, stream chunks and error bodies in the engines' own formats.

Chat and completion objects follow vLLM's OpenAI server (0.10 line): the first chat
chunk carries ``{"role": "assistant", "content": ""}``, the last content chunk carries
``finish_reason`` and ``stop_reason``, a usage-only chunk with ``choices: []`` follows
when ``stream_options.include_usage`` is set, then ``data: [DONE]``.
Error bodies differ by engine (see :func:`error_body`).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from sim.api_request import Kind


def dumps(obj: object) -> str:
    """Compact JSON, as the engines send it."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def sse(obj: object) -> bytes:
    """One Server-Sent Events data line."""
    return f"data: {dumps(obj)}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


def error_type(status: int) -> str:
    """vLLM's error type name for a status (BadRequestError, NotFoundError, ...)."""
    names = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}
    if status in names:
        return names[status]
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "Error"
    return "".join(word.capitalize() for word in phrase.replace("-", " ").split()) + "Error"


def error_body(dialect: str, message: str, status: int, kind: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An error object in the engine's shape.

    vLLM >= 0.10.1 (``vllm-v1``): ``{"error": {message, type, param, code}}``; vLLM up to
    0.10.0 and SGLang: ``{"object": "error", message, type, param, code}``; llama-server:
    ``{"error": {code, message, type}}`` with OpenAI-style type names.
    """
    kind = kind or error_type(status)
    if dialect == "llamacpp":
        llama_types = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                       501: "not_supported_error", 503: "unavailable_error"}
        ltype = kind if kind.endswith("_error") else llama_types.get(status, "server_error")
        return {"error": {"code": status, "message": message, "type": ltype}}
    if dialect in ("vllm-v0", "sglang"):
        return {"object": "error", "message": message, "type": kind, "param": param, "code": status}
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def usage(prompt: int, completion: int) -> dict[str, Any]:
    """A usage object."""
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None}


def full_response(
    kind: Kind,
    rid: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str | None,
    prompt_tokens: int,
    completion_tokens: int,
    role: str = "assistant",
    kv_transfer_params: dict[str, Any] | None = None,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    """A non-streaming response (``stop_reason``: the stop string that ended it)."""
    if kind == "chat":
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": role, "content": text, "refusal": None, "annotations": None, "audio": None,
                        "function_call": None, "tool_calls": [], "reasoning_content": None},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
        }
        return {"id": rid, "object": "chat.completion", "created": created, "model": model, "choices": [choice],
                "service_tier": None, "system_fingerprint": None, "usage": usage(prompt_tokens, completion_tokens),
                "prompt_logprobs": None, "kv_transfer_params": kv_transfer_params}
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": stop_reason,
              "prompt_logprobs": None}
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice],
            "service_tier": None, "system_fingerprint": None, "usage": usage(prompt_tokens, completion_tokens),
            "kv_transfer_params": kv_transfer_params}


class ChunkWriter:
    """Builds the SSE chunks of one streamed answer."""

    def __init__(self, kind: Kind, rid: str, created: int, model: str, role: str, prompt_tokens: int,
                 include_usage: bool, continuous_usage: bool) -> None:
        self.kind = kind
        self.rid = rid
        self.created = created
        self.model = model
        self.role = role
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.completion_tokens = 0
        self.stop_reason: str | None = None  # the stop string that ends the answer (on the last chunk)
        self.index = 0  # the choice its chunks carry (a request with several has a writer per choice)

    def _chunk(self, choices: list[dict[str, Any]], with_usage: bool) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        out: dict[str, Any] = {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                               "choices": choices}
        if with_usage:
            out["usage"] = usage(self.prompt_tokens, self.completion_tokens)
        elif self.kind == "completion":
            out["usage"] = None  # vLLM dumps completion chunks with every field
        return out

    def first(self) -> bytes | None:
        """The role chunk a chat stream opens with (None for completions)."""
        if self.kind != "chat":
            return None
        choice = {"index": self.index, "delta": {"role": self.role, "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return sse(self._chunk([choice], self.continuous_usage))

    def content(self, text: str, tokens: int, finish_reason: str | None) -> bytes:
        """A chunk carrying new text; with ``finish_reason`` it is the last content chunk."""
        self.completion_tokens += tokens
        if self.kind == "chat":
            delta = {"content": text} if text or finish_reason is None else {}
            choice: dict[str, Any] = {"index": self.index, "delta": delta, "logprobs": None,
                                      "finish_reason": finish_reason}
            if finish_reason is not None:
                choice["stop_reason"] = self.stop_reason
        else:
            stop_reason = self.stop_reason if finish_reason is not None else None
            choice = {"index": self.index, "text": text, "logprobs": None, "finish_reason": finish_reason,
                      "stop_reason": stop_reason, "prompt_token_ids": None, "token_ids": None}
        return sse(self._chunk([choice], self.continuous_usage))

    def final_usage(self, completion: int | None = None) -> bytes | None:
        """The usage-only chunk (``choices: []``), when the client asked for it (``completion``:
        the tokens of every choice, when there are several)."""
        if not self.include_usage:
            return None
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        tokens = self.completion_tokens if completion is None else completion
        return sse({"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": [],
                    "usage": {k: v for k, v in usage(self.prompt_tokens, tokens).items() if v is not None}})

    def error(self, body: dict[str, Any]) -> bytes:
        """An error event inside a stream (followed by ``[DONE]``, as vLLM does)."""
        return sse(body)
