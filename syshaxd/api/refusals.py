"""The answers the API server writes on its own: an error for a request its route failed,
and the 503 for a connection past a cap (rendered once, then the same bytes for every one)."""

from __future__ import annotations

import logging

from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.conductor import send_error
from syshaxd.errors import ApiError

log = logging.getLogger("syshaxd.api")


def failed(request: Request, response: Response, exc: Exception) -> None:
    """An error before or while answering: an OpenAI error object, or the end of what began."""
    if not isinstance(exc, ApiError):
        log.error("internal error on %s %s", request.method, request.path, exc_info=exc)
        exc = ApiError(500, "internal error in syshaxd (logged)", type="internal_error")
    elif response.started:
        log.warning("error after the answer started on %s %s: %s", request.method, request.path, exc)
    send_error(response, exc)


class _Capture:
    """A carrier that keeps what is written (to render an answer once and reuse its bytes)."""

    writable = True

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def response_done(self, response: Response) -> None:
        """Nothing follows."""

    async def wait_writable(self) -> None:
        """Always writable."""

    def abort(self) -> None:
        """Nothing to drop."""


_rendered: dict[str, bytes] = {}


def turned_away(message: str) -> bytes:
    """The 503 for a connection past a cap, rendered once per message."""
    answer = _rendered.get(message)
    if answer is None:
        capture = _Capture()
        send_error(Response(capture, keep_alive=False),
                   ApiError(503, message, type="service_unavailable", code="503", headers={"Retry-After": "1"}))
        answer = _rendered[message] = capture.data
    return answer
