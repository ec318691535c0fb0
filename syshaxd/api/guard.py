"""The API's guard: the API key, checked on every request once its head is read."""

from __future__ import annotations

import hmac

from syshaxd.api.request import Request
from syshaxd.errors import ApiError


class Guard:
    """Checks every request before its route sees it."""

    def __init__(self, api_key: str | None, open_paths: frozenset[str] = frozenset()) -> None:
        self.api_key = api_key.encode() if api_key else None
        self.open_paths = open_paths

    def check(self, request: Request) -> ApiError | None:
        """The error to answer instead, or None when the request may pass.

        Every route needs ``Authorization: Bearer <key>`` when ``services.conductor.api_key``
        is set, but ``open_paths`` (syshaxd's own health, metrics and docs, for probes and
        Prometheus). vLLM's ``--api-key`` guards only ``/v1/...``; behind syshaxd the engine's
        other routes (``/tokenize``, ``/rerank``, ...) would then be open to anyone who can
        reach the port, so they are guarded too. The open paths take no body then: they are
        read-only, and a body is all an anonymous client could make the server hold.
        """
        if not self.api_key:
            return None
        if request.path in self.open_paths:
            if _has_body(request):
                return ApiError(413, f"{request.path} takes no request body without the API key",
                                code="request_entity_too_large")
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


def _has_body(request: Request) -> bool:
    length = request.header(b"content-length")
    return request.header(b"transfer-encoding") is not None or (length is not None and length.strip() not in (b"", b"0"))
