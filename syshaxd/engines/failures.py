"""How an engine can fail a request, classified: worth trying elsewhere, or the client's own mistake."""

from __future__ import annotations

import json
from typing import Any

import httpx

from syshaxd.engines.connection import ConnectionLost, PoolClosed
from syshaxd.errors import engine_error_message


class EngineFailure(Exception):
    """An engine did not answer usefully (connection, 5xx, garbage): worth trying elsewhere."""

    def __init__(self, engine: str, message: str, status: int = 502) -> None:
        super().__init__(f"{engine}: {message}")
        self.engine = engine
        self.message = message
        self.status = status


class EngineRejected(Exception):
    """An engine refused the request itself (4xx): the client's problem, not the engine's."""

    def __init__(self, engine: str, status: int, body: bytes) -> None:
        super().__init__(f"{engine}: HTTP {status}")
        self.engine = engine
        self.status = status
        self.body = body


def describe_error(exc: BaseException) -> str:
    """A one-line description of a failure to reach or read an engine."""
    if isinstance(exc, PoolClosed):
        return str(exc)
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused or unreachable"
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, ConnectionLost | httpx.RemoteProtocolError):
        return "connection closed by the engine"
    if isinstance(exc, httpx.ConnectError | OSError):
        return "connection refused or unreachable"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def json_answer(engine: str, data: bytes) -> dict[str, Any]:
    """A 200 answer's JSON object, or the EngineFailure it amounts to (garbage, an error object)."""
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise EngineFailure(engine, "engine answered 200 with a body that is not JSON") from None
    if not isinstance(parsed, dict):
        raise EngineFailure(engine, "engine answered 200 with JSON that is not an object")
    if "error" in parsed and "choices" not in parsed:
        raise EngineFailure(engine, engine_error_message(200, data))
    return parsed
