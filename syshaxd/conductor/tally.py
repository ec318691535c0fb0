"""What a client received, counted: its output and prompt tokens, and when its tokens went out.

A request's record (:mod:`syshaxd.conductor.records`) says how many tokens the answer had and
how fast they came. The numbers are the engine's own where it reports them -- ``usage`` (a
whole answer; a stream's last chunk with ``stream_options.include_usage``), or llama-server's
``timings`` on a stream's last chunk -- and else counted from what was written to the client:
one token per choice whose delta carries content, reasoning or a tool call. A chat stream's
role-only first delta, an empty closing delta with ``finish_reason``, a usage-only chunk and
``[DONE]`` carry none. Each number says where it came from (:class:`Tally`).

Several choices (``n`` > 1) count as the sum over the choices, as vLLM's ``usage`` does. Engines
report them differently on a stream: vLLM sends one usage-only chunk (``choices: []``) for all
choices at the end; llama-server reports each choice apart -- a usage-only chunk after each
choice's last (chat), ``usage`` or ``timings`` on each choice's last chunk. So the usage-only
chunks' counts are summed (each covers the choices that ended since the one before), and a
count on a choice's own chunk is that choice's (its latest, summed over the choices). The
prompt is counted once: the choices share it. An engine count below the token-carrying deltas
written is incomplete (a stream cut after some choices reported): the deltas count then.

Times are those of the writes to the client: the first token is when the first event carrying
one was written (of any choice), and TPOT is the time from there to the last such write over
the tokens in between -- of one choice, the longest, when there are several: they decode side
by side. A whole answer's tokens reach the client at once: it has no token times.

The stream counter sits on the relay's path for every chunk, so an ordinary delta event of a
one-choice answer is judged from its bytes; only an event that may hold usage, timings, tool
calls or several choices is parsed as JSON (every event, when the request asked for several).
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
    #: Several choices: the tokens of the longest one (its TPOT's), None for one choice.
    longest: int | None = None

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
    (or :meth:`add` the parsed chunks read), then take the :meth:`tally`.

    ``choices``: how many the request asked for (its ``n``); with several, every event is parsed
    to count each choice apart.
    """

    __slots__ = ("_decoder", "_rest", "choices", "deltas", "first", "last", "per_choice", "timings_out",
                 "timings_prompt", "usage_out", "usage_prompt")

    def __init__(self, choices: int = 1) -> None:
        self.choices = choices
        self.deltas = 0  # tokens counted from the deltas (every choice)
        self.usage_out: int | None = None  # the usage-only chunks' counts, summed
        self.usage_prompt: int | None = None
        self.timings_out: int | None = None  # the usage-only chunks' timings, summed
        self.timings_prompt: int | None = None
        #: By choice index: [deltas with a token, its own usage count, its own timings count].
        self.per_choice: dict[int, list[int | None]] = {}
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
        if data[:1] != b"{" or data == DONE or data.startswith(b'{"error"'):
            return
        # Parsed as JSON only when it may hold usage, timings, tool calls or several choices, or
        # is written with spaces (which the token pattern misses): a plain delta is judged as bytes.
        if (self.choices > 1 or b'"usage":{' in data or b'"timings":{' in data or b'"tool_calls":[' in data
                or b'": ' in data or data.count(b'"index":') > 1):
            try:
                chunk = json.loads(data)
            except ValueError:
                return
            if isinstance(chunk, dict):
                self.add(chunk, now)
            return
        if _TOKEN.search(data) is not None:
            self._tokens(1, now)

    def add(self, chunk: dict[str, Any], now: float | None = None) -> None:
        """Take one parsed chunk (``now``: when it was written or read; time.monotonic() if None)."""
        usage, timings, choices = chunk.get("usage"), chunk.get("timings"), chunk.get("choices")
        listed = [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []
        own = _index(listed[0]) if len(listed) == 1 else None  # the one choice a count on this chunk is of
        if isinstance(usage, dict):
            out, prompt = _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))
            if own is not None:
                self._choice(own)[1] = out
            elif out is not None:
                self.usage_out = (self.usage_out or 0) + out
            self.usage_prompt = _most(self.usage_prompt, prompt)
        if isinstance(timings, dict):
            out = _count(timings.get("predicted_n"))
            if own is not None:
                self._choice(own)[2] = out
            elif out is not None:
                self.timings_out = (self.timings_out or 0) + out
            self.timings_prompt = _most(self.timings_prompt, _timings_prompt(timings))
        tokens = 0
        for choice in listed:
            if _carries_token(choice):
                tokens += 1
                if self.choices > 1:
                    entry = self._choice(_index(choice))
                    entry[0] = (entry[0] or 0) + 1
        if tokens:
            self._tokens(tokens, time.monotonic() if now is None else now)

    def _choice(self, index: int) -> list[int | None]:
        entry = self.per_choice.get(index)
        if entry is None:
            entry = self.per_choice[index] = [0, None, None]
        return entry

    def _tokens(self, n: int, now: float) -> None:
        self.deltas += n
        if self.first is None:
            self.first = now
        self.last = now

    def _own(self, slot: int) -> int | None:
        """The choices' own counts (usage: slot 1, timings: 2) summed, when every choice has one."""
        counts = [entry[slot] for entry in self.per_choice.values()]
        if not counts or any(c is None for c in counts):
            return None
        return sum(c for c in counts if c is not None)

    def tally(self) -> Tally:
        """The counts so far: the engine's where it reported them, else the deltas counted."""
        own_usage, own_timings = self._own(1), self._own(2)
        if self.usage_out is not None:
            out, out_source = self.usage_out, "usage"
        elif own_usage is not None:
            out, out_source = own_usage, "usage"
        elif self.timings_out is not None:
            out, out_source = self.timings_out, "timings"
        elif own_timings is not None:
            out, out_source = own_timings, "timings"
        else:
            out, out_source = self.deltas, "counted"
        if out < self.deltas:
            # A delta carries at least one token: a smaller count misses part of the answer (a
            # stream of several choices cut after the report of some of them).
            out, out_source = self.deltas, "counted"
        if self.usage_prompt is not None:
            prompt, prompt_source = self.usage_prompt, "usage"
        elif self.timings_prompt is not None:
            prompt, prompt_source = self.timings_prompt, "timings"
        else:
            prompt, prompt_source = None, None
        return Tally(out, out_source, prompt, prompt_source, self.first, self.last, self._longest())

    def _longest(self) -> int | None:
        """Several choices: the most tokens one of them had (its own count, else its deltas)."""
        if self.choices <= 1 or not self.per_choice:
            return None
        return max(next((c for c in (entry[1], entry[2], entry[0]) if c is not None), 0)
                   for entry in self.per_choice.values())


def _index(choice: dict[str, Any]) -> int:
    index = choice.get("index", 0)
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _most(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


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
