"""What a client received, counted: its output and prompt tokens, and when its tokens went out.

A request's record (:mod:`syshaxd.conductor.records`) says how many tokens the answer had and
how fast they came. The numbers are the engine's own where it reports them -- ``usage`` (a
whole answer; a stream's last chunk with ``stream_options.include_usage``), or llama-server's
``timings`` on a stream's last chunk -- and else counted from what was written to the client:
one token per choice whose delta carries content, reasoning or a tool call. A chat stream's
role-only first delta, an empty closing delta with ``finish_reason``, a usage-only chunk and
``[DONE]`` carry none. Each number says where it came from (:class:`Tally`).

Times are those of the writes to the client: the first token is when the first event carrying
one was written, and TPOT is the time from there to the last such write over the tokens in
between. A whole answer's tokens reach the client at once: it has no token times.

The stream counter sits on the relay's path for every chunk, so an ordinary delta event is
judged from its bytes; only an event that may hold usage, timings, tool calls or several
choices is parsed as JSON.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from syshaxd.sse import DONE, Decoder

#: A key of a delta (chat) or a choice (completions) with a non-empty string value. Inside a
#: JSON string every quote is escaped, so the pattern only ever matches a key.
_TOKEN = re.compile(rb'"(?:content|text|reasoning_content|reasoning)":"[^"]')


@dataclass(frozen=True, slots=True)
class Tally:
    """A finished answer's token counts and token times, each count with where it came from."""

    output_tokens: int | None = None
    #: ``usage`` (the engine's usage), ``timings`` (llama-server's), ``counted`` (deltas written).
    output_source: str | None = None
    #: The engine's prompt count; None: only syshaxd's estimate is known.
    prompt_tokens: int | None = None
    prompt_source: str | None = None  # usage, timings
    first_token: float | None = None  # time.monotonic() when the first token was written to the client
    last_token: float | None = None  # ... and the last

    @property
    def decode(self) -> float | None:
        """Seconds from the first token written to the last, when token times were seen."""
        if self.first_token is None or self.last_token is None:
            return None
        return max(0.0, self.last_token - self.first_token)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def whole_tally(answer: dict[str, Any]) -> Tally:
    """The counts of a whole (non-streamed) answer: its ``usage``, else llama-server's ``timings``."""
    usage, timings = answer.get("usage"), answer.get("timings")
    out = prompt = None
    out_source = prompt_source = None
    if isinstance(usage, dict):
        out, prompt = _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))
        out_source = "usage" if out is not None else None
        prompt_source = "usage" if prompt is not None else None
    if isinstance(timings, dict):
        if out is None and (n := _count(timings.get("predicted_n"))) is not None:
            out, out_source = n, "timings"
        if prompt is None and (p := _timings_prompt(timings)) is not None:
            prompt, prompt_source = p, "timings"
    return Tally(out, out_source, prompt, prompt_source)


def _timings_prompt(timings: dict[str, Any]) -> int | None:
    # llama-server's prompt_n is what it processed; cache_n what it reused from the slot.
    processed, cached = _count(timings.get("prompt_n")), _count(timings.get("cache_n"))
    return None if processed is None else processed + (cached or 0)


class StreamCounter:
    """Counts a streamed answer as it is written to the client: :meth:`feed` the bytes written
    (or :meth:`add` the parsed chunks read), then take the :meth:`tally`."""

    __slots__ = ("_decoder", "_rest", "deltas", "first", "last", "timings_out", "timings_prompt", "usage_out",
                 "usage_prompt")

    def __init__(self) -> None:
        self.deltas = 0  # tokens counted from the deltas (every choice)
        self.usage_out: int | None = None
        self.usage_prompt: int | None = None
        self.timings_out: int | None = None
        self.timings_prompt: int | None = None
        self.first: float | None = None
        self.last: float | None = None
        self._rest = b""
        self._decoder: Decoder | None = None  # once the stream uses CR line ends

    def feed(self, data: bytes) -> None:
        """Take bytes as they were written to the client (any cut: events may span writes)."""
        if self._decoder is None and b"\r" in data:
            self._decoder = Decoder()
            data, self._rest = self._rest + data, b""
        if self._decoder is not None:
            now = time.monotonic()
            for event in self._decoder.feed(data):
                self._data(event.data, now)
            return
        if self._rest:
            data = self._rest + data
        *events, self._rest = data.split(b"\n\n")
        if not events:
            return
        now = time.monotonic()
        for block in events:
            if block.startswith(b"data: ") and b"\n" not in block:
                self._data(block[6:], now)
            else:  # comments, several data lines, other fields: the full reader
                for event in Decoder().feed(block + b"\n\n"):
                    self._data(event.data, now)

    def _data(self, data: bytes, now: float) -> None:
        if data[:1] != b"{" or data == DONE:
            return
        # Parsed as JSON only when it may hold usage, timings, tool calls or several choices, or
        # is written with spaces (which the token pattern misses): a plain delta is judged as bytes.
        if ((b'"usage":{' in data or b'"timings":{' in data or b'"tool_calls":[' in data or b'": ' in data
             or data.count(b'"index":') > 1) and not data.startswith(b'{"error"')):
            try:
                chunk = json.loads(data)
            except ValueError:
                return
            if isinstance(chunk, dict):
                self.add(chunk, now)
            return
        if _TOKEN.search(data) is not None and not data.startswith(b'{"error"'):
            self._tokens(1, now)

    def add(self, chunk: dict[str, Any], now: float | None = None) -> None:
        """Take one parsed chunk (``now``: when it was written or read; time.monotonic() if None)."""
        usage, timings = chunk.get("usage"), chunk.get("timings")
        if isinstance(usage, dict):
            self.usage_out = _count(usage.get("completion_tokens"))
            self.usage_prompt = _count(usage.get("prompt_tokens"))
        if isinstance(timings, dict):
            self.timings_out = _count(timings.get("predicted_n"))
            self.timings_prompt = _timings_prompt(timings)
        choices = chunk.get("choices")
        if isinstance(choices, list):
            tokens = sum(1 for choice in choices if isinstance(choice, dict) and _carries_token(choice))
            if tokens:
                self._tokens(tokens, time.monotonic() if now is None else now)

    def _tokens(self, n: int, now: float) -> None:
        self.deltas += n
        if self.first is None:
            self.first = now
        self.last = now

    def tally(self) -> Tally:
        """The counts so far: the engine's where it reported them, else the deltas counted."""
        if self.usage_out is not None:
            out, out_source = self.usage_out, "usage"
        elif self.timings_out is not None:
            out, out_source = self.timings_out, "timings"
        else:
            out, out_source = self.deltas, "counted"
        if self.usage_prompt is not None:
            prompt, prompt_source = self.usage_prompt, "usage"
        elif self.timings_prompt is not None:
            prompt, prompt_source = self.timings_prompt, "timings"
        else:
            prompt, prompt_source = None, None
        return Tally(out, out_source, prompt, prompt_source, self.first, self.last)


def _carries_token(choice: dict[str, Any]) -> bool:
    """Whether a stream choice carries output: text, reasoning or a tool call (not a role alone,
    not an empty closing delta)."""
    if isinstance(choice.get("text"), str):
        return bool(choice["text"])
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    for key in ("content", "reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return True
    calls = delta.get("tool_calls")
    return isinstance(calls, list) and bool(calls)
