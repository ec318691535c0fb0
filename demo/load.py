"""The demo's client: replays the workload against the conductor, open loop, until told to stop.

Open loop on purpose: requests arrive when the trace says, whether or not earlier ones
have finished, so bursts in the trace become bursts at the GPU and the policy has to
send work elsewhere. Prompts are made of short words that the simulator's tokenizer
stand-in counts as one token each, so a request carries the trace's prompt length.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from demo.loadgen import Result, stream_chat
from demo.workload import Planned

#: Words of at most five ASCII letters: one token each for the simulator's tokenizer.
_WORDS = (
    "alpha bravo delta echo golf hotel india kilo lima mike oscar papa quack romeo salt "
    "tango union whisk xray yanke zulu amber azure coral ivory jade lemon olive peach plum "
    "rose ruby sand slate steel stone tan teal wheat"
).split()
#: Template tokens a one-message chat adds (4 per message, 2 for the generation prompt).
CHAT_OVERHEAD = 6
#: More requests than this in flight on the client side means the box is far past
#: saturation; further arrivals are counted as skipped instead of piling up sockets.
MAX_IN_FLIGHT = 384


def prompt_text(index: int, tokens: int) -> str:
    """A prompt of about ``tokens`` tokens (chat template included), different per request."""
    words = max(1, tokens - CHAT_OVERHEAD)
    n = len(_WORDS)
    return " ".join(_WORDS[(index * 7 + k * (1 + index % 5)) % n] for k in range(words))


def request_body(planned: Planned, model: str | None) -> dict[str, Any]:
    """The chat request for one planned request: exact output length (``ignore_eos``)."""
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt_text(planned.index, planned.prompt_tokens)}],
        "max_tokens": planned.output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if model:
        body["model"] = model
    return body


@dataclass
class Tally:
    """What the client saw so far."""

    sent: int = 0
    ok: int = 0
    errors: int = 0  # clean errors (429 queue full, 504, error events)
    lost: int = 0  # hangs or truncated streams: should stay 0
    skipped: int = 0  # arrivals not sent because MAX_IN_FLIGHT was reached
    in_flight: int = 0
    chunks: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    ttfts: deque[float] = field(default_factory=lambda: deque(maxlen=2048))
    finished_at: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=8192))

    def add(self, result: Result, now: float) -> None:
        """Count one finished request."""
        self.chunks += result.chunks
        self.finished_at.append((now, result.chunks))
        if result.ok:
            self.ok += 1
            if result.ttft is not None:
                self.ttfts.append(result.ttft)
        elif result.lost:
            self.lost += 1
        else:
            self.errors += 1
        if result.error:
            # Numbers vary per request ("request (2057 tokens) exceeds..."): group without them.
            kind = re.sub(r"\d+", "N", result.error.split(":", 1)[0])[:60]
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1

    def tokens_per_s(self, now: float, span: float = 5.0) -> float:
        """Streamed chunks (about one token each) per second over the last ``span`` seconds."""
        return sum(n for t, n in self.finished_at if now - t <= span) / span


class LoadDriver:
    """Sends planned requests at their times until stopped, then cancels what is in flight."""

    def __init__(
        self,
        url: str,
        plan: Iterator[Planned],
        *,
        model: str | None = None,
        api_key: str | None = None,
        request_timeout: float = 600.0,
    ) -> None:
        """``url`` is the conductor's base URL; ``plan`` yields requests in time order."""
        self.url = url.rstrip("/") + "/v1/chat/completions"
        self.plan = plan
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.request_timeout = request_timeout
        self.tally = Tally()
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Replay until ``stop`` is set; in-flight requests are cancelled on the way out
        (closing their connections is how the conductor learns to abort them)."""
        client = httpx.AsyncClient(
            headers=self.headers,
            timeout=httpx.Timeout(self.request_timeout, connect=10.0),
            limits=httpx.Limits(max_connections=MAX_IN_FLIGHT + 16, max_keepalive_connections=64),
        )
        start = time.monotonic()
        try:
            for planned in self.plan:
                delay = start + planned.at - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
                if self.tally.in_flight >= MAX_IN_FLIGHT:
                    self.tally.skipped += 1
                    continue
                task = asyncio.create_task(self._one(client, planned))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await client.aclose()

    async def _one(self, client: httpx.AsyncClient, planned: Planned) -> None:
        self.tally.sent += 1
        self.tally.in_flight += 1
        try:
            result = await stream_chat(
                client, self.url, request_body(planned, self.model), timeout=self.request_timeout
            )
        finally:
            self.tally.in_flight -= 1
        self.tally.add(result, time.monotonic())
