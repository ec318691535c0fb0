"""One request as it is read, held to the edge limits while it arrives.

The connection's parser callbacks feed an :class:`Incoming`: the target and each header are
counted as they come (a target past ``max_target_bytes`` is refused with 414, a head past
``max_header_bytes`` or ``max_headers`` with 431, at once, before more of it is kept), then
the head is checked as a whole (HTTP/1.0 or 1.1 only, exactly one Host for 1.1, no CONNECT,
a parseable target, a declared body within ``max_body_bytes``) and becomes a
:class:`~syshaxd.api.asgi.Request`; the body is counted as it comes. A check that fails
raises :class:`Refusal`: the status to answer before the connection closes.
"""

from __future__ import annotations

import httptools

from syshaxd.api.asgi import Request
from syshaxd.config import EdgeLimits


class Refusal(Exception):
    """A request that cannot be taken: answer ``status`` and close the connection."""

    def __init__(self, status: int, message: str, reason: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason  # the label it is counted under (syshax_http_requests_refused_total)
        self.code = code


def too_large_head(limits: EdgeLimits) -> Refusal:
    """The refusal of a head that passed ``max_header_bytes``."""
    return Refusal(431, f"request head is over the limit of {limits.max_header_bytes} bytes "
                   "(services.conductor.limits.max_header_bytes)", "header_size", "request_header_fields_too_large")


class Incoming:
    """A request being read: its head while it arrives, then the request and its body."""

    __slots__ = ("began", "body", "body_size", "checked", "complete", "continue_wanted", "has_body", "head_size",
                 "headers", "raw_left", "refusal", "request", "url", "url_size")

    def __init__(self, began: float) -> None:
        self.began = began  # loop time of its first byte
        self.url: list[bytes] = []
        self.url_size = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_size = 0
        self.request: Request | None = None  # once the head is whole
        self.body: list[bytes] = []
        self.body_size = 0
        self.has_body = False  # its head announced a body
        self.continue_wanted = False  # an HTTP/1.1 client waits for 100 Continue before sending the body
        self.complete = False  # the whole message was read
        self.checked = False  # the guard has seen it
        self.raw_left = 0  # body bytes to take past the parser (a refused protocol upgrade skipped them)
        self.refusal: Refusal | None = None  # answer this instead, then close

    # -- while the head arrives ----------------------------------------------------

    def add_url(self, part: bytes, limits: EdgeLimits) -> None:
        """A piece of the request target."""
        self.url_size += len(part)
        if self.url_size > limits.max_target_bytes:
            raise Refusal(414, f"request target is over the limit of {limits.max_target_bytes} bytes "
                          "(services.conductor.limits.max_target_bytes)", "target_size", "uri_too_long")
        self.url.append(part)
        self.head_size += len(part)

    def add_header(self, name: bytes, value: bytes, limits: EdgeLimits) -> None:
        """One whole header field."""
        self.head_size += len(name) + len(value) + 4
        if self.head_size > limits.max_header_bytes:
            raise too_large_head(limits)
        if len(self.headers) >= limits.max_headers:
            raise Refusal(431, f"request header fields are over the limit of {limits.max_headers} "
                          "(services.conductor.limits.max_headers)", "header_count", "request_header_fields_too_large")
        self.headers.append((name.lower(), value))

    def finish_head(self, parser: httptools.HttpRequestParser, max_body: int,
                    peer: tuple[str, int] | None, local: tuple[str, int] | None) -> Request:
        """The head is whole: check it and make the request (its body still to come)."""
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):
            raise Refusal(505, f"HTTP/{version} is not supported: send HTTP/1.1", "version",
                          "http_version_not_supported")
        method = parser.get_method().decode("latin-1")
        if method == "CONNECT":
            raise Refusal(405, "CONNECT is not supported: this is not a proxy", "method", "method_not_allowed")
        hosts = sum(1 for name, _ in self.headers if name == b"host")
        if hosts > 1 or (hosts == 0 and version == "1.1"):
            raise Refusal(400, "an HTTP/1.1 request needs exactly one Host header", "malformed")
        try:
            parsed = httptools.parse_url(b"".join(self.url))
        except httptools.HttpParserInvalidURLError:
            raise Refusal(400, "malformed request target", "malformed") from None
        self._check_body(version, max_body)
        raw_path = parsed.path or b"/"
        self.request = Request(method, raw_path, raw_path.decode("latin-1"), parsed.query or b"", version,
                               self.headers, b"", peer, local, keep_alive=parser.should_keep_alive())
        return self.request

    def _check_body(self, version: str, max_body: int) -> None:
        declared: int | None = None
        for name, value in self.headers:
            if name == b"content-length" and value.strip().isdigit():
                declared = int(value)  # the parser lets through one length, of digits only
            elif name == b"transfer-encoding":
                self.has_body = True
                self._check_codings(value)
        if declared is not None:
            if declared > max_body:
                raise Refusal(413, f"request body of {declared} bytes is over the limit of {max_body} bytes "
                              "(services.conductor.max_body_bytes)", "body_size")
            self.has_body = declared > 0
        expect = next((v for k, v in self.headers if k == b"expect"), None)
        self.continue_wanted = (version == "1.1" and self.has_body and expect is not None
                                and expect.lower() == b"100-continue")

    @staticmethod
    def _check_codings(value: bytes) -> None:
        # RFC 9112 6.1: a request body whose last coding is not chunked has no length (400);
        # codings before it this server does not undo (501).
        codings = [c.strip().lower() for c in value.split(b",")]
        if codings[-1] != b"chunked":
            raise Refusal(400, f"Transfer-Encoding {value[:60]!r} does not end in chunked", "malformed")
        if len(codings) > 1:
            raise Refusal(501, f"Transfer-Encoding {value[:60]!r} is not supported: send the body "
                          "with a Content-Length or only chunked", "malformed", "not_implemented")

    # -- the body ------------------------------------------------------------------

    def add_body(self, data: bytes, max_body: int) -> None:
        """A piece of the body."""
        self.body_size += len(data)
        if self.body_size > max_body:
            raise Refusal(413, f"request body is over the limit of {max_body} bytes "
                          "(services.conductor.max_body_bytes)", "body_size")
        self.body.append(data)

    def finish(self) -> None:
        """The whole message was read."""
        self.complete = True
        if self.request is not None:
            self.request.body = b"".join(self.body)
        self.body = []
