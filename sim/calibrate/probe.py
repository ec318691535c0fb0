"""Time one streamed completion: when its first token came and the gaps after it.

Prompts are lists of token ids (both vLLM and llama.cpp take them), drawn at random so
no two prompts share a prefix the engine could serve from its cache; ``ignore_eos`` makes
every answer exactly ``max_tokens`` long. Connections are not kept alive: llama-server
closes idle ones without saying so, and a request sent on a closed connection would be
timed from the wrong moment. Every probe is marked as one (:data:`~sim.calibrate.identity.PROBE_HEADER`
and an ``X-Request-Id`` of :func:`~sim.calibrate.identity.probe_request_id`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from sim.calibrate.identity import PROBE_HEADER, probe_request_id

#: Token ids drawn for prompts: above the special and byte tokens of common vocabularies,
#: below the smallest common vocabulary size (Llama 2's 32,000).
ID_LOW, ID_HIGH = 1000, 30000


class ProbeError(Exception):
    """A probe request failed; the message says how."""


@dataclass(frozen=True)
class Timing:
    """One streamed answer as the client saw it (seconds from sending the request)."""

    prompt_tokens: int
    output_tokens: int
    ttft: float
    end: float  # when the last token (or the finish event) arrived
    sent_at: float = 0.0  # time.perf_counter() when the request went out
    token_times: tuple[float, ...] = ()  # each streamed event with choices, from sent_at

    @property
    def tpot(self) -> float | None:
        """Mean seconds between tokens after the first; None for one token."""
        if self.output_tokens < 2:
            return None
        return (self.end - self.ttft) / (self.output_tokens - 1)


def random_prompt(rng: random.Random, tokens: int, vocab: int | None = None) -> list[int]:
    """``tokens`` random token ids."""
    high = min(ID_HIGH, vocab) if vocab else ID_HIGH
    return [rng.randrange(ID_LOW, high) for _ in range(max(1, tokens))]


def new_client(base_url: str, timeout: float = 600.0) -> httpx.AsyncClient:
    """An HTTP client for probes (no kept-alive connections)."""
    return httpx.AsyncClient(base_url=base_url, timeout=timeout,
                             limits=httpx.Limits(max_keepalive_connections=0, max_connections=1024))


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except ValueError:
        raise ProbeError(f"the stream sent something that is not JSON: {data[:200]!r}") from None
    if isinstance(event, dict) and "error" in event:
        raise ProbeError(f"the engine answered an error inside the stream: {event['error']}")
    return event if isinstance(event, dict) else None


#: A streamed token event, recognised without parsing it: the client shares two cores with
#: the engine under test, and parsing thousands of events a second would slow the engine.
_TOKEN_MARK = b'"choices":[{'
_TOKEN_EVENT: dict[str, Any] = {"choices": [None]}


async def _events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The stream's events. Lines end at ``\\n`` only: httpx's ``aiter_lines`` also breaks
    at U+2028 and friends, which a model's text may hold unescaped. Token events without
    usage or error are passed on unparsed (as ``_TOKEN_EVENT``)."""
    pending = b""
    async for chunk in resp.aiter_bytes():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if _TOKEN_MARK in line and b'"usage":{' not in line and b'"error"' not in line:
                yield _TOKEN_EVENT
                continue
            event = _event(line.decode("utf-8", errors="replace").rstrip("\r"))
            if event is not None:
                yield event


async def stream_completion(client: httpx.AsyncClient, model: str, prompt: list[int], max_tokens: int) -> Timing:
    """Send one streamed ``/v1/completions`` request and time it."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "temperature": 0.0, "stream_options": {"include_usage": True}}
    times: list[float] = []
    usage: dict[str, Any] = {}
    headers = {PROBE_HEADER[0]: PROBE_HEADER[1], "X-Request-Id": probe_request_id()}
    start = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/completions", json=body, headers=headers) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                raise ProbeError(f"/v1/completions answered HTTP {resp.status_code}: {text[:300]}")
            async for event in _events(resp):
                now = time.perf_counter() - start
                if event.get("choices"):
                    times.append(now)
                if isinstance(event.get("usage"), dict):
                    usage = event["usage"]
    except httpx.HTTPError as exc:
        raise ProbeError(f"request to {client.base_url} failed: {exc!r}") from None
    if not times:
        raise ProbeError("the stream ended without a token")
    output = usage.get("completion_tokens")
    prompt_tokens = usage.get("prompt_tokens")
    return Timing(prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else len(prompt),
                  output_tokens=output if isinstance(output, int) else len(times), ttft=times[0], end=times[-1],
                  sent_at=start, token_times=tuple(times))


async def batch(client: httpx.AsyncClient, model: str, prompts: list[list[int]], max_tokens: int) -> list[Timing]:
    """Send prompts together and time each."""
    return list(await asyncio.gather(*(stream_completion(client, model, p, max_tokens) for p in prompts)))
