"""Answers and stream chunks shaped like llama-server's OpenAI routes (docs/llama.md, "Behaviour").

Differences from vLLM's shape: no ``stop_reason``, ``service_tier`` or chat ``logprobs``;
``system_fingerprint`` is the build; ``usage.prompt_tokens_details`` is an object with the
prompt-cache hits; every final answer and last chunk carries ``timings``. Chat streams
open with ``content: null`` and end with an empty-delta chunk; completion streams put
``usage`` on their last chunk whether or not it was asked for.
"""

from __future__ import annotations

from typing import Any

from sim.api_format import ChunkWriter, sse
from sim.api_request import Kind
from sim.llama_server import BUILD_INFO


def llama_usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """llama-server's usage object (cache hits as ``prompt_tokens_details.cached_tokens``)."""
    return {"completion_tokens": completion, "prompt_tokens": prompt, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def llama_response(kind: Kind, rid: str, created: int, model: str, text: str, finish_reason: str | None,
                   prompt_tokens: int, completion_tokens: int, cached: int, timings: dict[str, Any],
                   role: str = "assistant") -> dict[str, Any]:
    """A non-streamed chat or completions answer."""
    if kind == "chat":
        choice: dict[str, Any] = {"finish_reason": finish_reason, "index": 0,
                                  "message": {"role": role, "content": text}}
        obj = "chat.completion"
    else:
        choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"choices": [choice], "created": created, "model": model, "system_fingerprint": BUILD_INFO,
            "object": obj, "usage": llama_usage(prompt_tokens, completion_tokens, cached), "id": rid,
            "timings": timings}


class LlamaChunkWriter(ChunkWriter):
    """The SSE chunks of one streamed llama-server answer; set ``timings`` before the last one."""

    def __init__(self, kind: Kind, rid: str, created: int, model: str, role: str, prompt_tokens: int,
                 include_usage: bool, cached: int) -> None:
        super().__init__(kind, rid, created, model, role, prompt_tokens, include_usage, False)
        self.cached = cached
        self.timings: dict[str, Any] = {}

    def _llama_chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return sse({"choices": choices, "created": self.created, "id": self.rid, "model": self.model,
                    "system_fingerprint": BUILD_INFO, "object": obj, **extra})

    def _usage(self) -> dict[str, Any]:
        return llama_usage(self.prompt_tokens, self.completion_tokens, self.cached)

    def first(self) -> bytes | None:
        """The role chunk of a chat stream (``content: null``); None for completions."""
        if self.kind != "chat":
            return None
        return self._llama_chunk([{"finish_reason": None, "index": self.index,
                                   "delta": {"role": self.role, "content": None}}])

    def content(self, text: str, tokens: int, finish_reason: str | None) -> bytes:
        """The chunk of one token; with ``finish_reason`` also the separate last chunk."""
        self.completion_tokens += tokens
        out = b""
        # a completions stream has a chunk for every token, also one whose text is held back
        # (a stop string may be forming); a chat stream skips empty deltas
        if text or (tokens and self.kind != "chat"):
            if self.kind == "chat":
                choice: dict[str, Any] = {"finish_reason": None, "index": self.index, "delta": {"content": text}}
            else:
                choice = {"text": text, "index": self.index, "logprobs": None, "finish_reason": None}
            out += self._llama_chunk([choice])
        if finish_reason is not None:
            if self.kind == "chat":
                out += self._llama_chunk([{"finish_reason": finish_reason, "index": self.index, "delta": {}}],
                                         timings=self.timings)
            else:
                last = {"text": "", "index": self.index, "logprobs": None, "finish_reason": finish_reason}
                out += self._llama_chunk([last], usage=self._usage(), timings=self.timings)
        return out

    def final_usage(self, completion: int | None = None) -> bytes | None:
        """Chat with ``include_usage``: a ``choices: []`` chunk with usage and timings (its own
        choice's: llama-server sends one after each choice's last chunk)."""
        if self.kind != "chat" or not self.include_usage:
            return None
        return self._llama_chunk([], usage=self._usage(), timings=self.timings)
