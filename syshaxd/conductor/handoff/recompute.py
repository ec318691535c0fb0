"""``recompute``: the GPU writes the first token, the CPU continues from prompt + text so far.

Works with any OpenAI engine. The CPU pays its own prefill of the whole prompt, so a
policy should only pick this for short prompts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from syshaxd.conductor.chunks import Piece, piece_of
from syshaxd.conductor.handoff.context import SplitContext, with_token_limit
from syshaxd.engines import engine_events


def continuation_body(body: dict[str, Any], chat: bool, text: str, remaining: int) -> dict[str, Any]:
    """The request that makes an engine continue an answer that already holds ``text``."""
    out = with_token_limit(body, remaining)
    if chat:
        out["messages"] = [*body["messages"], {"role": "assistant", "content": text}]
        # vLLM: continue the last assistant message instead of starting a new turn.
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    else:
        prompt = body["prompt"]
        out["prompt"] = (prompt[0] if isinstance(prompt, list) else prompt) + text
    out["stream"] = True
    out["stream_options"] = {"include_usage": True}
    return out


async def run(ctx: SplitContext) -> AsyncIterator[Piece]:
    """Yield the answer: the GPU's first token, then the CPU's continuation."""
    parsed = ctx.parsed
    chat = parsed.kind == "chat"
    first = with_token_limit(parsed.body, 1)
    first["stream"] = False
    first.pop("stream_options", None)
    data, _ = await ctx.gpu.post_json(parsed.path, json.dumps(first).encode())
    ctx.flight.first_byte(ctx.gpu)
    ctx.flight.release(ctx.gpu)
    head = piece_of(data, chat)
    generated = head.completion_tokens or 1
    yield Piece(text=head.text, reasoning=head.reasoning, prompt_tokens=head.prompt_tokens,
                completion_tokens=generated)
    if head.finish_reason == "stop" or generated >= parsed.max_tokens:
        yield Piece(finish_reason=head.finish_reason or "length")
        ctx.flight.release(ctx.cpu)
        return

    body = continuation_body(parsed.body, chat, head.text, parsed.max_tokens - generated)
    response = await ctx.cpu.open_stream(parsed.path, json.dumps(body).encode())
    try:
        ctx.flight.first_byte(ctx.cpu)
        async for event in engine_events(response, ctx.cpu.name):
            piece = piece_of(event, chat)
            # The CPU re-read the whole prompt + text: its prompt count is not the client's.
            piece.prompt_tokens = None
            yield piece
    finally:
        await response.aclose()
