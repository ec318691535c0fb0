"""A non-streamed OpenAI answer built from an engine's stream, for engines asked to stream.

llama-server notices that a client left a *non-streamed* request only after a full second
in which nothing else happened on the server, and every ``/metrics`` or ``/slots`` scrape
(the monitor's) resets that wait: an abandoned request runs to its end. Streamed requests
stop as soon as the connection closes. So the conductor always streams from such an
engine and builds the one JSON answer the client asked for here. Its ``usage`` covers every
choice, as vLLM's does: llama-server streams each choice's count apart (and its own whole
answer of several choices reports one choice's count), so they are summed as the request's
record sums them (:mod:`syshaxd.conductor.tally`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from syshaxd.conductor.tally import StreamCounter
from syshaxd.engines import EngineResponse, engine_events


def streaming_body(body: bytes) -> bytes:
    """The request body with ``stream: true`` and usage reporting switched on."""
    data = json.loads(body)
    data["stream"] = True
    data["stream_options"] = {"include_usage": True}
    # ASCII escapes: a lone surrogate the client sent ("\\ud800") has no UTF-8 form.
    return json.dumps(data, separators=(",", ":")).encode()


@dataclass
class _Choice:
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    logprobs: list[Any] = field(default_factory=list)
    finish_reason: str | None = None

    def add_tool_call(self, delta: dict[str, Any]) -> None:
        index = delta.get("index", len(self.tool_calls))
        call = self.tool_calls.setdefault(int(index), {"function": {"arguments": ""}})
        for key in ("id", "type"):
            if isinstance(delta.get(key), str):
                call[key] = delta[key]
        function = delta.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str):
                call["function"]["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                call["function"]["arguments"] += function["arguments"]


class Assembler:
    """Collects stream chunks (chat or completions) into one non-streamed answer."""

    def __init__(self, chat: bool) -> None:
        """Start an empty answer of the given kind."""
        self.chat = chat
        self.top: dict[str, Any] = {}
        self.choices: dict[int, _Choice] = {}
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.counts = StreamCounter()  # every choice's usage, summed

    def add(self, chunk: dict[str, Any]) -> None:
        """Take one decoded ``data:`` event."""
        for key in ("id", "created", "model", "system_fingerprint"):
            if key not in self.top and chunk.get(key) is not None:
                self.top[key] = chunk[key]
        self.counts.add(chunk, 0.0)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            self.timings = chunk["timings"]
        for raw in chunk.get("choices") or []:
            if isinstance(raw, dict):
                self._add_choice(raw)

    def _add_choice(self, raw: dict[str, Any]) -> None:
        index = raw.get("index", 0)
        choice = self.choices.setdefault(index if isinstance(index, int) else 0, _Choice())
        if isinstance(raw.get("finish_reason"), str):
            choice.finish_reason = raw["finish_reason"]
        logprobs = raw.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            choice.logprobs.extend(logprobs["content"])
        if not self.chat:
            if isinstance(raw.get("text"), str):
                choice.text.append(raw["text"])
            return
        delta = raw.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("content"), str):
            choice.text.append(delta["content"])
        if isinstance(delta.get("reasoning_content"), str):
            choice.reasoning.append(delta["reasoning_content"])
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                choice.add_tool_call(call)

    def answer(self) -> dict[str, Any]:
        """The answer as the engine would have sent it without streaming."""
        choices = [self._render(index, self.choices[index]) for index in sorted(self.choices)]
        out: dict[str, Any] = {
            "id": self.top.get("id"),
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.top.get("created"),
            "model": self.top.get("model"),
            "choices": choices,
        }
        if "system_fingerprint" in self.top:
            out["system_fingerprint"] = self.top["system_fingerprint"]
        if self.usage is not None:
            out["usage"] = self._usage(self.usage)
        if self.timings is not None:
            out["timings"] = self.timings
        return out

    def _usage(self, last: dict[str, Any]) -> dict[str, Any]:
        """The last usage reported, with the completion tokens of every choice."""
        counted = self.counts.tally()
        if counted.output_source != "usage" or counted.output_tokens is None:
            return last
        prompt = counted.prompt_tokens if counted.prompt_tokens is not None else last.get("prompt_tokens")
        usage = {**last, "completion_tokens": counted.output_tokens}
        if isinstance(prompt, int):
            usage["prompt_tokens"] = prompt
            usage["total_tokens"] = prompt + counted.output_tokens
        return usage

    def _render(self, index: int, choice: _Choice) -> dict[str, Any]:
        logprobs = {"content": choice.logprobs} if choice.logprobs else None
        if not self.chat:
            return {"index": index, "text": "".join(choice.text), "logprobs": logprobs,
                    "finish_reason": choice.finish_reason}
        message: dict[str, Any] = {"role": "assistant"}
        message["content"] = "".join(choice.text) if choice.text or not choice.tool_calls else None
        if choice.reasoning:
            message["reasoning_content"] = "".join(choice.reasoning)
        if choice.tool_calls:
            message["tool_calls"] = [choice.tool_calls[i] for i in sorted(choice.tool_calls)]
        out: dict[str, Any] = {"index": index, "message": message, "finish_reason": choice.finish_reason}
        if logprobs is not None:
            out["logprobs"] = logprobs
        return out


async def assemble(response: EngineResponse, engine: str, chat: bool, counter: StreamCounter | None = None) -> bytes:
    """Read an engine's whole stream and return the non-streamed JSON answer (``counter``: counts
    the chunks as they are read, for the request's record).

    Raises:
        EngineFailure: the stream broke, carried an error, or ended without ``[DONE]``.
    """
    assembler = Assembler(chat)
    async for chunk in engine_events(response, engine):
        assembler.add(chunk)
        if counter is not None:
            counter.add(chunk)
    return json.dumps(assembler.answer(), separators=(",", ":"), ensure_ascii=False).encode()
