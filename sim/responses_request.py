"""``POST /v1/responses`` request bodies into a chat :class:`~sim.api_request.GenSpec`, as each engine reads them.

vLLM (``serving_responses.py``, models without Harmony): ``instructions`` becomes a
system message, a string ``input`` a user message, a list of input items the chat's
messages; ``max_output_tokens`` is clipped to what the context leaves; tools, a
``prompt`` template, ``previous_response_id`` (nothing is stored) and ``background``
are refused with vLLM's errors. ``seed`` and ``ignore_eos`` are read as vLLM's later
versions do (the simulator's length rules need them). The fields the answer echoes
are kept in :class:`ResponsesParams`.

llama-server (``server_chat_convert_responses_to_chatcmpl``): the body becomes a chat
body (``input`` and ``instructions`` into ``messages``, ``max_output_tokens`` into
``max_tokens``; every other field passes through) and runs as a chat request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sim import textgen
from sim.api_request import (
    ApiError,
    GenSpec,
    bool_field,
    int_field,
    parse_messages,
    parse_request,
    requested_model,
)

INVALID_REQUEST = "invalid_request_error"


@dataclass(frozen=True)
class ResponsesParams:
    """What vLLM's answer echoes of a Responses request (``ResponsesResponse.from_request``)."""

    response_id: str
    instructions: str | None
    metadata: Any
    parallel_tool_calls: bool
    temperature: float
    tool_choice: Any
    top_p: float
    max_output_tokens: int
    max_tool_calls: Any
    reasoning: Any
    service_tier: Any
    text: Any
    top_logprobs: int
    truncation: Any
    user: Any


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(f"{name}: Input should be a valid number", param=name)
    return float(value)


def _vllm_refusals(body: dict[str, Any]) -> None:
    """The requests vLLM's Responses API turns away before generating (in its order)."""
    if body.get("background"):
        if body.get("store") is False:
            raise ApiError("background can only be used when `store` is true")
        raise ApiError("This vLLM engine does not support `store=True` and therefore does not support the background "
                       "mode. To enable these features, set the environment variable "
                       "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.", kind=INVALID_REQUEST)
    if body.get("prompt") is not None:
        raise ApiError("prompt template is not supported")
    previous = body.get("previous_response_id")
    if previous is not None:
        raise ApiError(f"Response with id '{previous}' not found.", 404, INVALID_REQUEST)
    if body.get("tools"):
        raise ApiError("Tool use is not supported in Responses API without Harmony None")


def _vllm_messages(body: dict[str, Any]) -> list[tuple[str, str]]:
    messages = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append(("system", instructions))
    value = body.get("input")
    if isinstance(value, str):
        return [*messages, ("user", value)]
    if not isinstance(value, list):
        raise ApiError("input: Field required (a string or a list of input items)", param="input")
    return messages + parse_messages({"messages": value}, llama=False) if value else messages


def vllm_request(body: dict[str, Any], *, served_model: str, max_model_len: int) -> tuple[GenSpec, ResponsesParams]:
    """A vLLM Responses body: the chat it runs and what the answer echoes."""
    model = requested_model(body, served_model, check_model=True)
    messages = _vllm_messages(body)
    _vllm_refusals(body)
    prompt = textgen.chat_tokens([c for _, c in messages])
    if prompt >= max_model_len:
        raise ApiError(f"The engine prompt length {prompt} exceeds the max_model_len {max_model_len}. Please reduce "
                       "prompt.", kind=INVALID_REQUEST)
    asked = int_field(body, "max_output_tokens", 1)
    max_tokens = min(asked, max_model_len - prompt) if asked is not None else max_model_len - prompt
    chat = {"model": model, "messages": [{"role": r, "content": c} for r, c in messages], "max_tokens": max_tokens,
            "stream": bool_field(body, "stream", False), "seed": body.get("seed"),
            "ignore_eos": bool_field(body, "ignore_eos", False)}
    spec = parse_request("chat", chat, served_model=served_model, max_model_len=max_model_len, check_model=False)
    request_id = body.get("request_id")
    params = ResponsesParams(
        response_id=request_id if isinstance(request_id, str) else f"resp_{uuid.uuid4().hex}",
        instructions=body.get("instructions"), metadata=body.get("metadata"),
        parallel_tool_calls=bool_field(body, "parallel_tool_calls", True),
        temperature=_number(body, "temperature", 1.0), tool_choice=body.get("tool_choice", "auto"),
        top_p=_number(body, "top_p", 1.0), max_output_tokens=max_tokens, max_tool_calls=body.get("max_tool_calls"),
        reasoning=body.get("reasoning"), service_tier=body.get("service_tier", "auto"), text=body.get("text"),
        top_logprobs=int_field(body, "top_logprobs") or 0, truncation=body.get("truncation", "disabled"),
        user=body.get("user"),
    )
    return spec, params


def _llama_text(item: dict[str, Any], kinds: tuple[str, ...], needs: str) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    out = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise ApiError(f"'type' must be one of {' or '.join(repr(k) for k in kinds)}; the simulated model reads "
                           "only text")
        if not isinstance(part.get("text"), str):
            raise ApiError(f"'{needs}' requires 'text'")
        out.append(part["text"])
    return "".join(out)


def _llama_item(item: object) -> tuple[str, str]:
    """One input item as a ``(role, text)`` message (llama-server's conversion, text only)."""
    if not isinstance(item, dict):
        raise ApiError("Cannot determine type of 'item'")
    role, kind = item.get("role"), item.get("type")
    if role in ("user", "system", "developer") and isinstance(item.get("content"), (str, list)):
        return role, _llama_text(item, ("input_text",), "Input text")
    if role == "assistant" and kind == "message":
        return "assistant", _llama_text(item, ("output_text", "input_text"), "Output text")
    if kind == "function_call_output" and isinstance(item.get("call_id"), str) and isinstance(item.get("output"), str):
        return "tool", item["output"]
    if kind in ("function_call", "reasoning"):
        return "assistant", ""
    raise ApiError("Cannot determine type of 'item'")


def _llama_messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    if "instructions" in body:
        instructions = body["instructions"]
        messages.append({"role": "system", "content": instructions if isinstance(instructions, str) else ""})
    value = body["input"]
    if isinstance(value, str):
        return [*messages, {"role": "user", "content": value}]
    if not isinstance(value, list):
        raise ApiError("'input' must be a string or array of objects")
    for item in value:
        role, text = _llama_item(item)
        if role == "assistant" and messages and messages[-1]["role"] == "assistant":
            messages[-1]["content"] += text  # llama-server merges consecutive assistant items
        else:
            messages.append({"role": role, "content": text})
    return messages


def llama_request(body: dict[str, Any], *, served_model: str, n_ctx: int) -> GenSpec:
    """A llama-server Responses body: the chat request it becomes."""
    if "input" not in body:
        raise ApiError("'input' is required")
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and previous:
        raise ApiError("llama.cpp does not support 'previous_response_id'.")
    chat = {k: v for k, v in body.items() if k not in ("input", "instructions", "max_output_tokens", "reasoning")}
    chat["messages"] = _llama_messages(body)
    if "max_output_tokens" in body:
        chat["max_tokens"] = body["max_output_tokens"]
    return parse_request("chat", chat, served_model=served_model, max_model_len=n_ctx, llama=True)
