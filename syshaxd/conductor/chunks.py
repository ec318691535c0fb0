"""What an engine's chunk adds to an answer (:class:`Piece`), and OpenAI chunks written for clients.

The direct path never uses this (bytes pass through untouched). A prefill/decode split
does: two engines' answers become one response with one id.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class Piece:
    """What one engine chunk adds to the answer."""

    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    id: str | None = None


def piece_of(data: dict[str, Any], chat: bool) -> Piece:
    """Extract text, finish reason, usage and id from a chunk or a whole completion."""
    piece = Piece(id=data.get("id") if isinstance(data.get("id"), str) else None)
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        choice = choices[0]
        if chat:
            part = choice.get("delta") or choice.get("message") or {}
            if isinstance(part, dict):
                piece.text = part.get("content") or ""
                piece.reasoning = part.get("reasoning_content") or ""
        else:
            piece.text = choice.get("text") or ""
        reason = choice.get("finish_reason")
        piece.finish_reason = reason if isinstance(reason, str) else None
    usage = data.get("usage")
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        piece.prompt_tokens = prompt if isinstance(prompt, int) else None
        piece.completion_tokens = completion if isinstance(completion, int) else None
    return piece


class ChunkWriter:
    """Writes one client-facing answer (stream chunks or a whole object) in OpenAI's format."""

    def __init__(self, chat: bool, request_id: str, model: str) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + request_id
        self.model = model
        self.created = int(time.time())
        self.object = "chat.completion.chunk" if chat else "text_completion"

    def _chunk(self, choice: dict[str, Any], usage: dict[str, int] | None = None) -> bytes:
        data: dict[str, Any] = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": [choice] if choice else [],
        }
        if usage is not None:
            data["usage"] = usage
        return b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"

    def role(self) -> bytes:
        """The first chunk of a chat stream (vLLM sends the role alone)."""
        if not self.chat:
            return b""
        return self._chunk(
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        )

    def delta(self, text: str, reasoning: str = "") -> bytes:
        """A chunk carrying new text."""
        if self.chat:
            delta: dict[str, str] = {}
            if reasoning:
                delta["reasoning_content"] = reasoning
            if text or not reasoning:
                delta["content"] = text
            return self._chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})
        return self._chunk({"index": 0, "text": text, "logprobs": None, "finish_reason": None})

    def finish(self, reason: str) -> bytes:
        """The chunk that ends the choice."""
        if self.chat:
            return self._chunk({"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason})
        return self._chunk({"index": 0, "text": "", "logprobs": None, "finish_reason": reason})

    def usage(self, prompt: int, completion: int) -> bytes:
        """The usage chunk (``stream_options.include_usage``): no choices."""
        return self._chunk(
            {},
            {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        )

    @staticmethod
    def done() -> bytes:
        """The end of the stream."""
        return b"data: [DONE]\n\n"

    def whole(self, text: str, reasoning: str, finish_reason: str, prompt: int, completion: int) -> dict[str, Any]:
        """A non-streaming answer object."""
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
            if reasoning:
                message["reasoning_content"] = reasoning
            choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage,
        }
