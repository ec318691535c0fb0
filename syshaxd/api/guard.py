"""The API's guard: the API keys, checked on every request once its head is read."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from syshaxd.api.request import Request
from syshaxd.errors import ApiError


def _digest(secret: bytes) -> bytes:
    return hashlib.sha256(secret).digest()


class Guard:
    """Checks every request before its route sees it, and names the key it came with."""

    def __init__(self, keys: Mapping[str, str] | None, open_paths: frozenset[str] = frozenset()) -> None:
        """``keys``: each API key's secret by its name (none or empty: the port is open)."""
        # Digests, not the secrets: every comparison is then of 32 bytes, whatever a key's length.
        self.keys = tuple((name, _digest(secret.encode())) for name, secret in (keys or {}).items())
        self.open_paths = open_paths

    def check(self, request: Request) -> ApiError | None:
        """The error to answer instead, or None when the request may pass; a request that passes
        with a key has its name in ``request.api_key_name``.

        Every route needs ``Authorization: Bearer <key>`` when an API key is set
        (``services.conductor.api_key`` or ``api_keys``), but ``open_paths`` (syshaxd's own health,
        metrics and docs, for probes and Prometheus). vLLM's ``--api-key`` guards only ``/v1/...``;
        behind syshaxd the engine's other routes (``/tokenize``, ``/rerank``, ...) would then be
        open to anyone who can reach the port, so they are guarded too. The open paths take no
        body then: they are read-only, and a body is all an anonymous client could make the
        server hold.
        """
        if not self.keys:
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
        name = self._match(_digest(token)) if token else None
        if name is not None:
            request.api_key_name = name
            return None
        return ApiError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'",
                        code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    def _match(self, digest: bytes) -> str | None:
        """The name of the key whose digest this is. Every key is compared, in constant time,
        whichever matches: how long the check takes says nothing of which key (or how much of
        one) was right."""
        found = None
        for name, known in self.keys:
            same = hmac.compare_digest(digest, known)
            found = name if same else found
        return found


def _has_body(request: Request) -> bool:
    length = request.header(b"content-length")
    return request.header(b"transfer-encoding") is not None or (length is not None and length.strip() not in (b"", b"0"))
