"""What the conductor hands the API for one request: a whole body, or a stream of SSE bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from syshaxd.engines import EngineRejected
from syshaxd.errors import engine_error_message, error_body


@dataclass
class Answer:
    """What the API layer sends back: a whole body, or a stream of SSE bytes."""

    status: int = 200
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Called once the response is over, however it ended (also when the client left
    #: before the stream was ever iterated, when the generator's own cleanup never runs).
    cleanup: Callable[[], None] | None = None


def rejected_answer(rejected: EngineRejected) -> Answer:
    """An engine refused the request itself (4xx): the client gets that answer, nothing is retried.

    The body is the engine's, reshaped to OpenAI's error object when it is not one already.
    """
    try:
        data = json.loads(rejected.body)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            return Answer(status=rejected.status, body=rejected.body)
    except (ValueError, UnicodeDecodeError):
        pass
    message = engine_error_message(rejected.status, rejected.body)
    kind = "not_found_error" if rejected.status == 404 else "invalid_request_error"
    body = json.dumps(error_body(message, type=kind, code=str(rejected.status))).encode()
    return Answer(status=rejected.status, body=body)
