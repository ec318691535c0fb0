"""What the official openai client received, and the daemon's record of the same request.

Each case sends one request with its own ``X-Request-Id`` through a real syshaxd, counts what
the client got (its ``usage`` when it had one, else the deltas that carried a token) and finds
the request's record over the control socket (``GET /v1/requests``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from syshaxd.schema import RequestRecordModel
from tests.plugins.ports import wait_until

MESSAGES = [{"role": "user", "content": "Tell me a story about a fox and a crow."}]
PROMPT = "The fox looked up at the crow and said"
MODEL = "ds-32b"  # the simulator serves it; llama-server takes any name
_ids = itertools.count()


@dataclass
class Seen:
    """What the client got: the deltas that carried a token (per choice, summed), the usage (the
    last one it got), the choices it got and every usage it got (llama-server reports each
    choice's apart)."""

    request_id: str
    deltas: int
    usage_out: int | None
    usage_prompt: int | None
    choices: int = 1
    usages: tuple[int, ...] = ()


def new_id(tag: str) -> str:
    """A request id no other test uses."""
    return f"rec-{tag}-{next(_ids)}"


def _delta_tokens(chunk: Any, chat: bool) -> int:
    n = 0
    for choice in chunk.choices or []:
        if chat:
            delta = choice.delta
            if delta is not None and (delta.content or delta.tool_calls or getattr(delta, "reasoning_content", None)):
                n += 1
        elif choice.text:
            n += 1
    return n


def ask(client: Any, kind: str, *, stream: bool, usage: bool = False, max_tokens: int = 8, tag: str = "case",
        **extra: Any) -> Seen:
    """Send one request through the openai client and read all of it; returns what it got."""
    rid = new_id(tag)
    args: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "extra_headers": {"X-Request-Id": rid},
                            **extra}
    chat = kind == "chat"
    create = client.chat.completions.create if chat else client.completions.create
    if chat:
        args.setdefault("messages", MESSAGES)
    else:
        args.setdefault("prompt", PROMPT)
    if not stream:
        answer = create(**args)
        u = answer.usage
        return Seen(rid, 0, u.completion_tokens if u else None, u.prompt_tokens if u else None,
                    len({c.index for c in answer.choices}), (u.completion_tokens,) if u else ())
    if usage:
        args["stream_options"] = {"include_usage": True}
    deltas, out, prompt, usages, indexes = 0, None, None, [], set()
    with create(stream=True, **args) as chunks:
        for chunk in chunks:
            deltas += _delta_tokens(chunk, chat)
            indexes.update(c.index for c in chunk.choices or [])
            if chunk.usage is not None:
                out, prompt = chunk.usage.completion_tokens, chunk.usage.prompt_tokens
                usages.append(out)
    return Seen(rid, deltas, out, prompt, len(indexes), tuple(usages))


def abort_after(client: Any, kind: str, deltas: int, *, max_tokens: int, tag: str = "abort", **extra: Any) -> Seen:
    """Stream, read until ``deltas`` tokens came, then close the connection."""
    rid = new_id(tag)
    chat = kind == "chat"
    args: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "stream": True,
                            "extra_headers": {"X-Request-Id": rid}, **extra}
    create = client.chat.completions.create if chat else client.completions.create
    args.update({"messages": MESSAGES} if chat else {"prompt": PROMPT})
    got = 0
    chunks = create(**args)
    try:
        for chunk in chunks:
            got += _delta_tokens(chunk, chat)
            if got >= deltas:
                break
    finally:
        chunks.close()
    return Seen(rid, got, None, None)


def record(socket_path: Path, request_id: str, timeout: float = 30.0) -> RequestRecordModel:
    """The daemon's record of ``request_id``, once it is written."""
    found: list[RequestRecordModel] = []

    def look() -> bool:
        transport = httpx.HTTPTransport(uds=str(socket_path))
        with httpx.Client(transport=transport, base_url="http://syshaxd", timeout=10) as control:
            answer = control.get("/v1/requests")
        answer.raise_for_status()
        found[:] = [r for r in (RequestRecordModel.model_validate(i) for i in answer.json())
                    if r.request_id == request_id]
        return bool(found)

    assert wait_until(look, timeout=timeout), f"no record of {request_id}"
    return found[0]


def check(rec: RequestRecordModel, seen: Seen, *, engine_prompt: int | None = None) -> None:
    """The record says what the client got: the usage it received, else its own count of deltas;
    the prompt is the engine's (``engine_prompt``: its usage for the same prompt, when this
    client got none); never more output than the maximum (of every choice); TPOT from the token
    times. (Several choices whose usage came apart: the caller checks the sum.)"""
    assert rec.outcome == "ok", rec
    assert rec.choices == seen.choices, (rec, seen)
    if seen.usage_out is not None and len(seen.usages) <= 1:
        assert (rec.output_tokens, rec.output_tokens_source) == (seen.usage_out, "usage"), rec
        assert (rec.prompt_tokens, rec.prompt_tokens_source) == (seen.usage_prompt, "usage"), rec
    elif rec.output_tokens_source == "counted":
        assert rec.output_tokens == seen.deltas, (rec, seen)
    else:
        # The engine's own count (syshaxd asked for the usage the client did not, or llama-server's
        # timings): a delta may carry more than one token (llama-server holds back a token that
        # ends inside a UTF-8 character, or one its chat parser must see more of).
        assert rec.output_tokens_source in ("usage", "timings"), rec
        assert rec.output_tokens is not None and rec.output_tokens >= seen.deltas, (rec, seen)
    if engine_prompt is not None:
        assert rec.prompt_tokens == engine_prompt, rec
        assert rec.prompt_tokens_source in ("usage", "timings"), rec
    assert rec.output_tokens is not None and rec.output_tokens <= rec.max_tokens * rec.choices, rec
    assert rec.ttft is not None and rec.ttft <= rec.e2e, rec
    steps = rec.output_tokens if rec.choices == 1 else -(-rec.output_tokens // rec.choices)  # at least the mean
    if rec.stream and steps > 1:
        assert rec.tpot is not None and 0 <= rec.tpot * (steps - 1) <= rec.e2e - rec.ttft + 1e-6, rec
