"""Parse an OpenAI request body just enough to route it (the API's boundary).

Everything the client sent is kept: only a missing ``model`` and a missing token limit are
filled in, and only when absent. Unknown fields pass through to the engine untouched.
"""

from __future__ import annotations

import json
from typing import Any

from syshaxd.config import Config
from syshaxd.errors import ApiError
from syshaxd.request import (
    MESSAGE_OVERHEAD,
    NO_ASK,
    Kind,
    ParsedRequest,
    ServiceAsk,
    dump_body,
    estimate_tokens,
)

#: The most choices (``n``) one request may ask for. Each runs as a sequence of its own on the
#: engine, booked as such: a larger ``n`` would take a batch's worth of sequences at once.
MAX_CHOICES = 16


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'{key}' must be an integer, got {json.dumps(value)[:40]}", key)
    if value < 1:
        raise _bad(f"'{key}' must be at least 1, got {value}", key)
    return value


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict):
                raise _bad(f"{where}.content[{i}] must be an object", "messages")
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
        return "\n".join(parts)
    raise _bad(f"{where}.content must be a string or a list of content parts", "messages")


def _chat_prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array of message objects", "messages")
    total = 0
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(f"{where} must be an object with 'role' and 'content'", "messages")
        role = message.get("role")
        if not isinstance(role, str):
            raise _bad(f"{where}.role must be a string", "messages")
        total += estimate_tokens(_content_text(message.get("content"), where)) + MESSAGE_OVERHEAD
    return total


def _completion_prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return estimate_tokens(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return len(prompt)  # already token ids
        if all(isinstance(p, str) for p in prompt):
            if len(prompt) > 1:
                raise _bad("a batch of several prompts is not supported; send one request per prompt", "prompt")
            return estimate_tokens(prompt[0])
    raise _bad("'prompt' must be a string, a one-element array of strings, or an array of token ids", "prompt")


def _json_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise _bad("request body is empty; expected a JSON object")
    try:
        # JSON on the wire is UTF-8 (RFC 8259); json.loads(bytes) would guess UTF-16/32 too.
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _bad("request body is not valid UTF-8") from None
    except RecursionError:
        raise _bad("request body is nested too deeply") from None
    except ValueError as exc:
        raise _bad(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise _bad(f"request body must be a JSON object, not {type(body).__name__}")
    return body


def _choices(value: Any) -> int:
    """The body's ``n`` (choices), checked: 1 when absent."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'n' must be an integer, got {json.dumps(value)[:40]}", "n")
    if not 1 <= value <= MAX_CHOICES:
        raise _bad(f"'n' must be from 1 to {MAX_CHOICES}, got {value}: each choice runs as a sequence of its "
                   "own; send several requests for more", "n")
    return value


def _priority(value: Any) -> int | None:
    """The body's ``priority`` in vLLM's convention (lower first), checked."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'priority' must be an integer (lower runs first, as in vLLM), got {json.dumps(value)[:40]}",
                   "priority")
    if not -1000 <= value <= 1000:
        raise _bad(f"'priority' must be from -1000 to 1000 (lower runs first), got {value}", "priority")
    return value


def parse_request(raw: bytes, kind: Kind, config: Config, ask: ServiceAsk = NO_ASK,
                  trace: tuple[tuple[str, str], ...] = (), probe: bool = False,
                  api_key_name: str | None = None) -> ParsedRequest:
    """Validate a request body and fill in the default model and token limit.

    ``ask`` is what the request's headers asked of its service level; the body's ``priority``
    joins it and leaves the body (the conductor forwards the class's priority to the engines
    only when ``service.forward_priority`` says so: an engine without priority scheduling
    refuses the field). ``trace``: the client's W3C trace context headers; ``probe``: the
    request is marked as calibrate's probe; ``api_key_name``: the name of the key the guard let
    it in with.

    Raises:
        ApiError: 400 with a precise message for anything the engines could not serve.
    """
    body = _json_object(raw)

    changed = False
    model = body.get("model")
    if model is None:
        body["model"] = model = config.models.default
        changed = True
    elif not isinstance(model, str) or not model:
        raise _bad("'model' must be a non-empty string", "model")

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("'stream' must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage"))

    n = _choices(body.get("n"))

    max_completion = _positive_int(body, "max_completion_tokens")
    max_plain = _positive_int(body, "max_tokens")
    max_tokens = max_completion if max_completion is not None else max_plain  # vLLM's order
    if max_tokens is None:
        max_tokens = config.models.params.max_tokens
        body["max_tokens"] = max_tokens
        changed = True

    if kind == "chat":
        prompt_tokens = _chat_prompt_tokens(body.get("messages"))
    else:
        prompt_tokens = _completion_prompt_tokens(body.get("prompt"))

    temperature = body.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
        raise _bad("'temperature' must be a number", "temperature")

    if "priority" in body:
        changed = True
        priority = _priority(body.pop("priority"))
        if priority is not None:
            ask = ServiceAsk(ask.class_name, ask.ttft_ms, ask.tpot_ms, priority)

    num_decode = body.get("num_decode_tokens")
    if num_decode is not None and (isinstance(num_decode, bool) or not isinstance(num_decode, int)):
        raise _bad("'num_decode_tokens' must be an integer", "num_decode_tokens")

    out = dump_body(body) if changed else raw
    return ParsedRequest(
        kind=kind, body=body, raw=out, model=model, stream=stream, include_usage=include_usage,
        max_tokens=max_tokens, prompt_tokens=prompt_tokens, has_num_decode_tokens=num_decode is not None,
        messages=len(body["messages"]) if kind == "chat" else 0,
        temperature=float(temperature) if temperature is not None else None,
        ask=ask,
        trace=trace,
        n=n,
        probe=probe,
        api_key_name=api_key_name,
    )
