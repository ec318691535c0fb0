"""Helpers shared by the real llama-server tests: metrics, slots, SSE parsing."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

#: Greedy sampling: the same prompt gives the same text on any server with the same model.
GREEDY: dict[str, Any] = {"temperature": 0.0, "top_k": 1}

#: The tiny model may sample EOS at any point; tests that count tokens forbid it.
NO_EOS: dict[str, Any] = {"ignore_eos": True}


def metric_samples(text: str) -> dict[str, float]:
    """Sample name -> value of one /metrics scrape (the names carry no labels here)."""
    return {s.name: float(s.value) for f in text_string_to_metric_families(text) for s in f.samples}


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    """GET /metrics and parse it."""
    resp = await client.get("/metrics")
    assert resp.status_code == 200, resp.text
    return metric_samples(resp.text)


async def slots(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """GET /slots."""
    resp = await client.get("/slots")
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert isinstance(data, list)
    return data


async def wait_all_idle(client: httpx.AsyncClient, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Poll /slots until no slot is processing; return the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        current = await slots(client)
        if not any(s["is_processing"] for s in current):
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"slots still busy after {timeout}s: {current}")
        await asyncio.sleep(0.02)


def sse_events(raw: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order (comments and blanks dropped)."""
    out = []
    for block in raw.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                out.append(line[len("data: ") :])
    return out


def sse_json(raw: str) -> tuple[list[dict[str, Any]], bool]:
    """JSON chunks of an SSE body, and whether it ended with `data: [DONE]`."""
    events = sse_events(raw)
    done = bool(events) and events[-1] == "[DONE]"
    return [json.loads(e) for e in events if e != "[DONE]"], done


async def predicted_total(urls: tuple[str, ...]) -> float:
    """``llamacpp:tokens_predicted_total`` summed over servers."""
    total = 0.0
    async with httpx.AsyncClient(timeout=10) as http:
        for url in urls:
            total += metric_samples((await http.get(f"{url}/metrics")).text)["llamacpp:tokens_predicted_total"]
    return total


async def wait_processing(urls: tuple[str, ...], busy: bool, timeout: float = 60.0) -> None:
    """Poll the servers' /slots every 20 ms until some slot is busy (or none is).

    Polling that often is also the traffic that keeps an abandoned non-streamed request
    alive on llama-server (docs/llama.md, "Disconnects").
    """
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            found = [s for url in urls for s in (await http.get(f"{url}/slots")).json()]
            if any(s["is_processing"] for s in found) == busy:
                return
            assert time.monotonic() < deadline, f"slots never became {'busy' if busy else 'idle'}: {found}"
            await asyncio.sleep(0.02)
