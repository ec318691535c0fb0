"""Concurrent streaming chats through the official ``openai`` client: a burst that grows memory."""

from __future__ import annotations

import asyncio

import openai


async def burst(url: str, n: int, max_tokens: int = 24) -> int:
    """``n`` concurrent streaming chats against ``url``; returns how many ended with a finish reason."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)

    async def one(i: int) -> bool:
        stream = await client.chat.completions.create(
            model="ds-32b", messages=[{"role": "user", "content": f"tell me a story {i}"}],
            max_tokens=max_tokens, stream=True,
        )
        finish = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return finish is not None

    try:
        done = await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await client.close()
    return sum(done)
