"""Parse OpenAI chat/completions request bodies the way vLLM does, into a GenSpec.

Only what the simulator needs is read; unknown fields are ignored (vLLM logs and drops
them). Mistakes become :class:`ApiError` with vLLM's messages and status codes.
Length rules (vLLM's order): ``max_completion_tokens``, else ``max_tokens``, else what is
left of ``max_model_len``; llama.cpp's ``n_predict`` wins when present. ``stop`` strings
are read here and honoured by :mod:`sim.stops`. With ``llama`` the rules are
llama-server's: the ``model`` field is ignored (answers name the served model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from sim import textgen
from sim.llama_params import LlamaParams, llama_params

Kind = Literal["chat", "completion"]
#: Content part types that carry text (the Responses API's input items use the last two).
TEXT_PARTS = ("text", "input_text", "output_text")


class ApiError(Exception):
    """A request the engine refuses, with the engine's status and error type."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError", param: str | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.param = param
        self.extra = extra or {}


@dataclass(frozen=True)
class GenSpec:
    """One generation request, parsed."""

    kind: Kind
    model: str
    prompt_tokens: int  # context the engine sees before the first new token
    fingerprint: str  # names the conversation (for text and slot caches)
    seed: int | None
    offset: int  # answer tokens already generated elsewhere (first new token's index)
    max_new: int  # new tokens allowed by max_tokens / n_predict / the context length
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    role: str
    num_decode_tokens: int | None = None
    request_id_inference: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    id_slot: int | None = None
    predict_zero: bool = False  # llama.cpp n_predict/max_tokens 0: one token, but the slot keeps only the prompt
    stop: tuple[str, ...] = ()  # stop strings: the answer ends where the first appears, without it
    llama_params: LlamaParams = field(default_factory=LlamaParams)  # what llama.cpp's /slots shows of the request
    n: int = 1  # choices: sequences generated from the one prompt

    @property
    def text_key(self) -> int:
        """The key of this answer's generated text."""
        return textgen.request_key(self.fingerprint, self.seed)

    @property
    def wants_remote_decode(self) -> bool:
        """A kv-transfer prefill copy (the decode runs elsewhere)."""
        return bool(self.kv_transfer_params and self.kv_transfer_params.get("do_remote_decode"))

    @property
    def wants_remote_prefill(self) -> bool:
        """A kv-transfer decode request (the prefill ran elsewhere)."""
        return bool(self.kv_transfer_params and self.kv_transfer_params.get("do_remote_prefill"))


def parse_body(raw: bytes, llama: bool = False) -> dict[str, Any]:
    """The JSON object of a request body.

    ``llama``: llama-server answers a parse error with a 500 (its JSON library throws) and
    reads any other JSON value as an object without fields.
    """
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        if llama:
            raise ApiError(f"[json.exception.parse_error.101] parse error: {exc}", 500, "server_error") from None
        raise ApiError(f"JSON decode error: {exc}") from None
    if not isinstance(body, dict):
        if llama:
            return {}
        raise ApiError("Input should be a valid dictionary or object to extract fields from")
    return body


def int_field(body: dict[str, Any], name: str, minimum: int | None = None) -> int | None:
    """An optional integer field (a float that is a whole number passes), at least ``minimum``."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ApiError(f"{name}: Input should be a valid integer", param=name)
    if minimum is not None and value < minimum:
        raise ApiError(f"{name} must be at least {minimum}, got {value}.", param=name)
    return int(value)


def bool_field(body: dict[str, Any], name: str, default: bool) -> bool:
    """An optional boolean field (``default`` when absent or null)."""
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(f"{name}: Input should be a valid boolean", param=name)
    return value


def str_field(body: dict[str, Any], name: str) -> str | None:
    """An optional string field."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(f"{name}: Input should be a valid string", param=name)
    return value


def _content_text(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
            else:
                raise ApiError(f"{where}: the simulated model accepts only text content parts", param="messages")
        return "".join(parts)
    raise ApiError(f"{where}: content must be a string or a list of content parts", param="messages")


def parse_messages(body: dict[str, Any], llama: bool) -> list[tuple[str, str]]:
    """``messages`` as ``(role, text)`` pairs (text parts joined; other parts refused)."""
    messages = body.get("messages")
    if llama and "messages" not in body:
        raise ApiError("'messages' is required", param="messages")
    if llama and isinstance(messages, list) and not messages:
        return []  # llama-server renders the template around nothing
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages: Field required (a non-empty list of messages)", param="messages")
    out: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(f"messages[{i}]: Input should be a valid dictionary", param="messages")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ApiError(f"messages[{i}].role: Field required", param="messages")
        out.append((role, _content_text(message.get("content"), f"messages[{i}].content")))
    return out


def _prompt(body: dict[str, Any]) -> tuple[str, int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, textgen.count_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return json.dumps(prompt), len(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise ApiError("prompt: the simulator serves one prompt per request", param="prompt")
    raise ApiError("prompt: Field required (a string or a list of token ids)", param="prompt")


def _llama_limits(max_tokens: int | None, n_predict: int | None, context: int, n_ctx: int) -> tuple[int, bool]:
    """llama-server's length rules: ``(new tokens, predict_zero)``.

    ``n_predict`` wins over ``max_tokens``; -1 or nothing runs to the end of the slot's
    context (no error for asking more); 0 still generates one token.
    """
    if context >= n_ctx:
        raise ApiError(f"request ({context} tokens) exceeds the available context size ({n_ctx} tokens), "
                       "try increasing it", kind="exceed_context_size_error",
                       extra={"n_prompt_tokens": context, "n_ctx": n_ctx})
    room = n_ctx - context
    limit = n_predict if n_predict is not None else max_tokens
    if limit is None or limit < 0:
        return room, False
    return max(1, min(limit, room)), limit == 0


def _vllm_limits(max_tokens: int | None, n_predict: int | None, context: int, max_model_len: int, offset: int,
                 has_generated_text: bool, prompt_param: str) -> int:
    """vLLM's length rules: new tokens allowed, or an error when the request cannot fit."""
    if context >= max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, your request has "
            f"{context} input tokens. Please reduce the length of the input messages.",
            param=prompt_param,
        )
    room = max_model_len - context
    if n_predict is not None and n_predict >= 0:
        max_new = min(n_predict, room)
    elif max_tokens is not None:
        if has_generated_text:
            max_tokens = max(1, max_tokens - offset)  # sysHAX: the limit covers the whole answer
        if max_tokens > room:
            raise ApiError(
                f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                f"{max_tokens + context} tokens ({context} in the messages, {max_tokens} in the completion). "
                f"Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        max_new = max_tokens
    else:
        max_new = room
    return max_new


def requested_model(body: dict[str, Any], served_model: str, check_model: bool) -> str:
    """The model a request names (the served one when it names none)."""
    model = str_field(body, "model")
    if model is None:
        return served_model
    if check_model and model != served_model:
        raise ApiError(f"The model `{model}` does not exist.", status=404, kind="NotFoundError", param="model")
    return model


def json_type(value: object) -> str:
    """The JSON type name nlohmann::json gives a value (in llama-server's type errors)."""
    if value is None:
        return "null"
    return {bool: "boolean", dict: "object", list: "array"}.get(type(value), "number")


def _stops(body: dict[str, Any], llama: bool) -> tuple[str, ...]:
    """``stop`` as a tuple of strings, refused or ignored as each server does."""
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list):
        if stop is None or llama:  # llama-server ignores a stop that is neither a string nor a list
            return ()
        raise ApiError("stop: Input should be a valid string or a list of strings", param="stop")
    for item in stop:
        if not isinstance(item, str):
            if llama:
                raise ApiError(f"Field 'stop': [json.exception.type_error.302] type must be string, but is "
                               f"{json_type(item)}")
            raise ApiError("stop: Input should be a valid string", param="stop")
        if not item and not llama:  # llama-server stops at once on an empty string; vLLM refuses it
            raise ApiError("stop cannot contain an empty string.", param="stop")
    return tuple(stop)


def _stream_options(body: dict[str, Any], stream: bool, llama: bool) -> tuple[bool, bool]:
    """``(include_usage, continuous_usage_stats)`` from ``stream_options``."""
    options = body.get("stream_options")
    if options is None or (llama and not stream):  # llama-server ignores them without a stream
        return False, False
    if not stream:
        raise ApiError("Stream options can only be defined when `stream=True`.", param="stream_options")
    if not isinstance(options, dict):
        raise ApiError("stream_options: Input should be a valid dictionary", param="stream_options")
    include_usage = bool(options.get("include_usage"))
    return include_usage, include_usage and bool(options.get("continuous_usage_stats"))


def _chat_prompt(body: dict[str, Any], llama: bool) -> tuple[int, str, str, int]:
    """A chat's ``(prompt tokens, fingerprint, answer role, answer tokens already written)``.

    With ``continue_final_message`` the final message is the answer so far: the text
    continues from its end, in its role.
    """
    messages = parse_messages(body, llama)
    add_gen = bool_field(body, "add_generation_prompt", True)
    cont = bool_field(body, "continue_final_message", False)
    if cont and add_gen:
        raise ApiError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    role = messages[-1][0] if not add_gen and messages else "assistant"
    prompt_tokens = textgen.chat_tokens([c for _, c in messages], add_generation_prompt=add_gen)
    convo, written = messages, 0
    if cont and messages:
        convo, written = messages[:-1], textgen.count_tokens(messages[-1][1])
    return prompt_tokens, json.dumps(convo, ensure_ascii=False), role, written


def _kv_transfer_params(body: dict[str, Any]) -> dict[str, Any] | None:
    ktp = body.get("kv_transfer_params")
    if ktp is not None and not isinstance(ktp, dict):
        raise ApiError("kv_transfer_params: Input should be a valid dictionary", param="kv_transfer_params")
    return ktp


def parse_request(
    kind: Kind, body: dict[str, Any], *, served_model: str, max_model_len: int, check_model: bool = True,
    llama: bool = False,
) -> GenSpec:
    """Validate a chat or completions body and size the work it asks for.

    ``llama``: llama-server's rules (``max_model_len`` is then the slot's context).
    """
    # llama-server answers with its --alias whatever the request names
    model = served_model if llama else requested_model(body, served_model, check_model)
    stream = bool_field(body, "stream", False)
    include_usage, continuous = _stream_options(body, stream, llama)
    # vLLM takes any n from 1; llama-server at most one per slot (checked where the slots are known)
    n = int_field(body, "n", None if llama else 1)
    n = 1 if n is None else n
    seed = int_field(body, "seed")
    max_tokens = int_field(body, "max_completion_tokens", 1) if kind == "chat" else None
    if max_tokens is None:
        max_tokens = int_field(body, "max_tokens", -1 if llama else 1)
    n_predict = int_field(body, "n_predict", -1)
    ignore_eos = bool_field(body, "ignore_eos", False)
    generated_text = str_field(body, "generated_text")
    generated = textgen.count_tokens(generated_text) if generated_text else 0

    if kind == "chat":
        prompt_tokens, fingerprint, role, written = _chat_prompt(body, llama)
    else:
        fingerprint, prompt_tokens = _prompt(body)
        role, written = "assistant", 0
    offset = generated + written

    context = prompt_tokens + generated
    predict_zero = False
    if llama:
        max_new, predict_zero = _llama_limits(max_tokens, n_predict, context, max_model_len)
    else:
        max_new = _vllm_limits(max_tokens, n_predict, context, max_model_len, offset, generated_text is not None,
                               "messages" if kind == "chat" else "prompt")

    ndt = int_field(body, "num_decode_tokens", 0)
    rid_inf = str_field(body, "request_id_inference")
    ktp = _kv_transfer_params(body)
    id_slot = int_field(body, "id_slot")
    if n > 1 and (ndt is not None or rid_inf is not None or ktp is not None or id_slot is not None):
        raise ApiError("n: the simulator hands over one sequence: n > 1 with num_decode_tokens, "
                       "request_id_inference, kv_transfer_params or id_slot is not simulated", param="n")
    params = llama_params(body, chat=kind == "chat", n_predict=n_predict if n_predict is not None else max_tokens,
                          stream=stream, ignore_eos=ignore_eos, seed=seed) if llama else LlamaParams()
    return GenSpec(
        kind=kind,
        model=model,
        prompt_tokens=context,
        fingerprint=fingerprint,
        seed=seed,
        offset=offset,
        max_new=max_new,
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        role=role,
        num_decode_tokens=ndt,
        request_id_inference=rid_inf,
        kv_transfer_params=ktp,
        id_slot=id_slot if id_slot is not None and id_slot >= 0 else None,
        predict_zero=predict_zero,
        stop=_stops(body, llama),
        llama_params=params,
        n=n,
    )
