"""The API's guard, as plain ASGI: a bound on request heads, and the API key."""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from syshaxd.errors import error_body

#: Largest request head (all header names and values) accepted; 431 above. h11 alone bounds
#: headers only when they span several reads, so a large head sent at once would pass.
MAX_HEADER_BYTES = 64 * 1024


class GuardMiddleware:
    """Header size limit and the API key, as plain ASGI.

    Starlette's ``BaseHTTPMiddleware`` (``@app.middleware``) pipes every streamed chunk
    through an extra memory stream and task; on the token-streaming hot path that costs
    more than everything else the conductor does.
    """

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        size = sum(len(name) + len(value) + 4 for name, value in headers)
        if size > MAX_HEADER_BYTES:
            response = JSONResponse(
                error_body(f"request headers total {size} bytes, over the limit of {MAX_HEADER_BYTES}",
                           type="invalid_request_error", code="request_header_fields_too_large"),
                status_code=431,
            )
            await response(scope, receive, send)
            return
        if self.api_key and scope["path"].startswith("/v1/"):
            token = b""
            for name, value in headers:
                if name == b"authorization":
                    scheme, _, token = value.partition(b" ")
                    token = token.strip() if scheme.lower() == b"bearer" else b""
                    break
            if not hmac.compare_digest(token, self.api_key):
                response = JSONResponse(
                    error_body("missing or invalid API key: send 'Authorization: Bearer <key>'",
                               type="invalid_request_error", code="invalid_api_key"),
                    status_code=401, headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
