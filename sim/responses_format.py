"""Responses API bodies and SSE events, as vLLM and llama-server write them.

vLLM: ``ResponsesResponse`` (``protocol.py``, 0.10 line: the request's echoed settings,
``output`` with one ``message`` whose id is ``msg_<hex>``, ``usage`` with
``input_tokens_details.cached_tokens`` and ``output_tokens_details.reasoning_tokens``).
Its stream is the non-Harmony event sequence of vLLM 0.11's ``serving_responses.py``,
each event written ``event: <type>\\ndata: <json>\\n\\n`` and numbered by
``sequence_number``: ``response.created``, ``response.in_progress``, then with the
first token ``response.output_item.added`` and ``response.content_part.added``, one
``response.output_text.delta`` per token, then ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done`` and
``response.completed`` with the whole response. No ``data: [DONE]``. Two of that
version's slips are not copied: its ``content_index`` grew with every event (here 0,
the one content part, as OpenAI numbers it) and its ``response.completed`` carried
only the last delta's text (here the whole answer).

llama-server: a short body (``completed_at``, ``created_at``, ``id``, ``model``,
``object``, ``output``, ``status``, ``usage``) and events without ``sequence_number``,
``output_index`` or ``content_index``; ``response.completed`` carries ``timings``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from sim.api_format import dumps
from sim.responses_request import ResponsesParams


def event(obj: dict[str, Any]) -> bytes:
    """One server-sent event named by its ``type``."""
    return f"event: {obj['type']}\ndata: {dumps(obj)}\n\n".encode()


def _text_part(text: str, logprobs: list[Any] | None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def vllm_usage(prompt: int, generated: int, cached: int = 0) -> dict[str, Any]:
    """vLLM's ``ResponseUsage``."""
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": generated,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": prompt + generated}


def vllm_output(text: str) -> list[dict[str, Any]]:
    """The ``output`` of a finished answer: one assistant message (none for empty text, as vLLM)."""
    if not text:
        return []
    return [{"id": f"msg_{uuid.uuid4().hex}", "content": [_text_part(text, None)], "role": "assistant",
             "status": "completed", "type": "message"}]


def vllm_response(p: ResponsesParams, *, model: str, created: int, output: list[dict[str, Any]], status: str,
                  usage: dict[str, Any] | None) -> dict[str, Any]:
    """vLLM's ``ResponsesResponse`` (``from_request``: the request's settings echoed)."""
    return {
        "id": p.response_id, "created_at": created, "instructions": p.instructions, "metadata": p.metadata,
        "model": model, "object": "response", "output": output, "parallel_tool_calls": p.parallel_tool_calls,
        "temperature": p.temperature, "tool_choice": p.tool_choice, "tools": [], "top_p": p.top_p,
        "background": False, "max_output_tokens": p.max_output_tokens, "max_tool_calls": p.max_tool_calls,
        "previous_response_id": None, "prompt": None, "reasoning": p.reasoning, "service_tier": p.service_tier,
        "status": status, "text": p.text, "top_logprobs": p.top_logprobs, "truncation": p.truncation,
        "usage": usage, "user": p.user,
    }


class VllmEvents:
    """The SSE events of one streamed vLLM Responses answer."""

    def __init__(self, params: ResponsesParams, model: str, created: int, prompt_tokens: int) -> None:
        self.params, self.model, self.created, self.prompt_tokens = params, model, created, prompt_tokens
        self.sequence = 0
        self.item_id = str(uuid.uuid4())  # vLLM names the streamed item by a bare uuid
        self.parts: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        obj = {**fields, "sequence_number": self.sequence, "type": kind}
        self.sequence += 1
        return event(obj)

    def _response(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        return vllm_response(self.params, model=self.model, created=self.created, output=output, status=status,
                             usage=usage)

    def opening(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress`` (sent before the first token)."""
        start = self._response("in_progress", [], None)
        return [self._event("response.created", response=start), self._event("response.in_progress", response=start)]

    def token(self, text: str) -> list[bytes]:
        """The events of one generated token."""
        out = []
        if not self.parts:
            item = {"id": self.item_id, "content": [], "role": "assistant", "status": "in_progress", "type": "message"}
            out += [self._event("response.output_item.added", item=item, output_index=0),
                    self._event("response.content_part.added", content_index=0, item_id=self.item_id,
                                output_index=0, part=_text_part("", []))]
        self.parts.append(text)
        out.append(self._event("response.output_text.delta", content_index=0, delta=text, item_id=self.item_id,
                               logprobs=[], output_index=0))
        return out

    def closing(self, text: str, generated: int, timings: dict[str, Any] | None = None) -> list[bytes]:
        """The done events and ``response.completed`` (``timings`` is llama-server's; vLLM has none)."""
        out = []
        if self.parts:
            streamed = "".join(self.parts)
            part = _text_part(streamed, None)
            item = {"id": self.item_id, "content": [part], "role": "assistant", "status": "completed",
                    "type": "message", "summary": []}
            out += [self._event("response.output_text.done", content_index=0, item_id=self.item_id, logprobs=[],
                                output_index=0, text=streamed),
                    self._event("response.content_part.done", content_index=0, item_id=self.item_id,
                                output_index=0, part=part),
                    self._event("response.output_item.done", item=item, output_index=0)]
        final = self._response("completed", vllm_output(text), vllm_usage(self.prompt_tokens, generated))
        return [*out, self._event("response.completed", response=final)]


def llama_usage(prompt: int, generated: int, cached: int) -> dict[str, Any]:
    """llama-server's Responses ``usage``."""
    return {"input_tokens": prompt, "output_tokens": generated, "total_tokens": prompt + generated,
            "input_tokens_details": {"cached_tokens": cached}}


def _llama_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def llama_response(response_id: str, *, model: str, now: int, text: str, usage: dict[str, Any]) -> dict[str, Any]:
    """llama-server's non-streamed Responses body."""
    output = [{"content": [_llama_part(text)], "id": f"msg_{uuid.uuid4().hex}", "role": "assistant",
               "status": "completed", "type": "message"}] if text else []
    return {"completed_at": now, "created_at": now, "id": response_id, "model": model, "object": "response",
            "output": output, "status": "completed", "usage": usage}


class LlamaEvents:
    """The SSE events of one streamed llama-server Responses answer."""

    def __init__(self, response_id: str, model: str, prompt_tokens: int, cached: int) -> None:
        self.response_id, self.model, self.prompt_tokens, self.cached = response_id, model, prompt_tokens, cached
        self.item_id = f"msg_{uuid.uuid4().hex}"
        self.started = False

    def opening(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress`` (llama-server sends them with the first token)."""
        head = {"id": self.response_id, "object": "response", "status": "in_progress"}
        return [event({"type": "response.created", "response": head}),
                event({"type": "response.in_progress", "response": head})]

    def token(self, text: str) -> list[bytes]:
        """The events of one token: none while its text is held back (an empty delta)."""
        if not text:
            return []
        out = []
        if not self.started:
            self.started = True
            item = {"content": [], "id": self.item_id, "role": "assistant", "status": "in_progress", "type": "message"}
            out += [event({"type": "response.output_item.added", "item": item}),
                    event({"type": "response.content_part.added", "item_id": self.item_id,
                           "part": {"type": "output_text", "text": ""}})]
        out.append(event({"type": "response.output_text.delta", "item_id": self.item_id, "delta": text}))
        return out

    def closing(self, text: str, generated: int, timings: dict[str, Any] | None = None) -> list[bytes]:
        """The done events (for a non-empty answer) and ``response.completed`` with ``timings``."""
        out, output = [], []
        if text:
            part = _llama_part(text)
            item = {"type": "message", "status": "completed", "id": self.item_id, "content": [part],
                    "role": "assistant"}
            out += [event({"type": "response.output_text.done", "item_id": self.item_id, "text": text}),
                    event({"type": "response.content_part.done", "item_id": self.item_id, "part": part}),
                    event({"type": "response.output_item.done", "item": item})]
            output.append(item)
        final = {"id": self.response_id, "object": "response", "created_at": int(time.time()), "status": "completed",
                 "model": self.model, "output": output,
                 "usage": llama_usage(self.prompt_tokens, generated, self.cached)}
        completed: dict[str, Any] = {"type": "response.completed", "response": final}
        if timings is not None:
            completed["timings"] = timings
        return [*out, event(completed)]
