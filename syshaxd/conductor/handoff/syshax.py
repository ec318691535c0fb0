"""``syshax``: the sysHAX vLLM fork, whose engines share KV through shared memory.

The GPU prefills and writes two tokens (``num_decode_tokens: 2``); the CPU continues from
the GPU's request id (``request_id_inference``) for up to the policy's token limit and
answers ``finish_reason: "scheduled"`` when it stops there; the conductor then asks the
policy again and continues from the CPU's new id.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace

from syshaxd.conductor.chunks import Piece, piece_of
from syshaxd.conductor.handoff.context import SplitContext
from syshaxd.engines import engine_events

SCHEDULED = "scheduled"
GPU_DECODE_TOKENS = 2


async def run(ctx: SplitContext) -> AsyncIterator[Piece]:
    """Yield the answer from the GPU's first tokens and the CPU's scheduled segments."""
    parsed = ctx.parsed
    chat = parsed.kind == "chat"
    prefill = dict(parsed.body, num_decode_tokens=GPU_DECODE_TOKENS, stream=False)
    prefill.pop("stream_options", None)
    data, _ = await ctx.gpu.post_json(parsed.path, json.dumps(prefill).encode())
    ctx.flight.first_byte(ctx.gpu)
    ctx.flight.release(ctx.gpu)
    head = piece_of(data, chat)
    text = head.text
    generated = head.completion_tokens or len(text.split()) or 1
    yield Piece(text=head.text, reasoning=head.reasoning, prompt_tokens=head.prompt_tokens,
                completion_tokens=generated)
    if head.finish_reason != SCHEDULED:
        yield Piece(finish_reason=head.finish_reason or "stop")
        ctx.flight.release(ctx.cpu)
        return

    request_id = head.id or ""
    decision = ctx.decision
    first_segment = True
    while True:
        limit = decision.token_limit or parsed.max_tokens + 1  # max_tokens + 1: to the end
        body = dict(
            parsed.body,
            request_id_inference=request_id,
            num_decode_tokens=limit,
            generated_text=text,
            stream=True,
            stream_options={"include_usage": True},
        )
        response = await ctx.cpu.open_stream(parsed.path, json.dumps(body).encode())
        finish: str | None = None
        try:
            if first_segment:
                ctx.flight.first_byte(ctx.cpu)
                first_segment = False
            async for event in engine_events(response, ctx.cpu.name):
                piece = piece_of(event, chat)
                request_id = piece.id or request_id
                piece.prompt_tokens = None
                if piece.finish_reason == SCHEDULED:
                    finish = SCHEDULED
                    piece.finish_reason = None
                elif piece.finish_reason:
                    finish = piece.finish_reason
                text += piece.text
                if piece.completion_tokens is not None:
                    generated += piece.completion_tokens
                yield piece
        finally:
            await response.aclose()
        if finish != SCHEDULED:
            return
        ctx.notes.append(f"scheduled after {generated} tokens")
        decision = await ctx.flight.reask(replace(ctx.flight.features, generated_tokens=generated))
