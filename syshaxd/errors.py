"""OpenAI-shaped errors: raised once where a request goes wrong, rendered once at the edge.

:class:`ApiError` is the error; its two renderings are the only ones syshaxd writes on the
API port: :meth:`ApiError.json` is the body of an error answer, :meth:`ApiError.event` the
same object as the last event of a stream that has begun (followed by ``[DONE]``, as vLLM
ends a stream with an error). Where they are written to a client is
:mod:`syshaxd.conductor.reply` (``send_error``, ``end_stream``).
"""

from __future__ import annotations

import json
from typing import Any

_DONE_EVENT = b"data: [DONE]\n\n"


class ApiError(Exception):
    """An error a client caused or must be told about, with its HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The OpenAI error object."""
        return error_body(self.message, type=self.type, param=self.param, code=self.code or str(self.status))

    def json(self) -> bytes:
        """The error object as an answer's body: compact JSON, UTF-8."""
        return json.dumps(self.body(), ensure_ascii=False, separators=(",", ":")).encode()

    def event(self) -> bytes:
        """The error object as the end of an event stream: its event, then ``[DONE]``."""
        return b"data: " + self.json() + b"\n\n" + _DONE_EVENT


def error_body(message: str, *, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` as the OpenAI API answers."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def engine_error_message(status: int, body: bytes) -> str:
    """The message inside an engine's error answer (either vLLM error shape), else a summary."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        text = body[:200].decode("utf-8", "replace").strip()
        return f"engine answered HTTP {status}" + (f": {text}" if text else "")
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if isinstance(data.get("message"), str):  # vLLM <= 0.10.0: {"object": "error", "message": ...}
            return str(data["message"])
        if isinstance(data.get("detail"), str):
            return str(data["detail"])
    return f"engine answered HTTP {status}"
