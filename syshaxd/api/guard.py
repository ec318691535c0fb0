"""The API's guard: a bound on request heads, and the API key."""

from __future__ import annotations

import hmac

from syshaxd.api.asgi import Request
from syshaxd.errors import ApiError

#: Largest request head (all header names and values) accepted; 431 above.
MAX_HEADER_BYTES = 64 * 1024


class Guard:
    """Checks every request before its route sees it."""

    def __init__(self, api_key: str | None) -> None:
        self.api_key = api_key.encode() if api_key else None

    def check(self, request: Request) -> ApiError | None:
        """The error to answer instead, or None when the request may pass.

        The OpenAI routes (``/v1/...``) need ``Authorization: Bearer <key>`` when
        ``services.conductor.api_key`` is set, as vLLM's ``--api-key`` does.
        """
        if not self.api_key or not request.path.startswith("/v1/"):
            return None
        token = b""
        value = request.header(b"authorization")
        if value is not None:
            scheme, _, token = value.partition(b" ")
            token = token.strip() if scheme.lower() == b"bearer" else b""
        if hmac.compare_digest(token, self.api_key):
            return None
        return ApiError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
                        code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
