"""One request as it is read: the checks of its whole head, then its body as it arrives.

:func:`read_head` checks a whole head (HTTP/1.0 or 1.1 only, exactly one Host for 1.1, no
CONNECT, a parseable target, a Transfer-Encoding that ends in chunked and has nothing else, a
declared body within ``max_body_bytes``) and makes the :class:`~syshaxd.api.request.Request`,
held by an :class:`Incoming` that counts its body as it comes. A check that fails raises
:class:`Refusal`: the status to answer before the connection closes. (The limits on a head
while it arrives are the reader's, :mod:`syshaxd.api.reader`.)
"""

from __future__ import annotations

import httptools

from syshaxd.api.request import Request
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


def too_many_headers(limits: EdgeLimits) -> Refusal:
    """The refusal of a head with more than ``max_headers`` fields."""
    return Refusal(431, f"request header fields are over the limit of {limits.max_headers} "
                   "(services.conductor.limits.max_headers)", "header_count", "request_header_fields_too_large")


def too_long_target(limits: EdgeLimits) -> Refusal:
    """The refusal of a target longer than ``max_target_bytes``."""
    return Refusal(414, f"request target is over the limit of {limits.max_target_bytes} bytes "
                   "(services.conductor.limits.max_target_bytes)", "target_size", "uri_too_long")


class Incoming:
    """A request whose head is whole: the request, and its body as it arrives."""

    __slots__ = ("began", "body", "body_size", "checked", "complete", "continue_wanted", "has_body", "raw_left",
                 "refusal", "request")

    def __init__(self, began: float, request: Request | None = None) -> None:
        self.began = began  # loop time of its first byte
        self.request = request  # None: a refusal stands in for a request that could not be read
        self.body: list[bytes] = []
        self.body_size = 0
        self.has_body = False  # its head announced a body
        self.continue_wanted = False  # an HTTP/1.1 client waits for 100 Continue before sending the body
        self.complete = False  # the whole message was read
        self.checked = False  # the guard has seen it
        self.raw_left = 0  # body bytes to take past the parser (a refused protocol upgrade skipped them)
        self.refusal: Refusal | None = None  # answer this instead, then close

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


def read_head(parser: httptools.HttpRequestParser, began: float, url: bytes, headers: list[tuple[bytes, bytes]],
              max_body: int, ends: tuple[tuple[str, int] | None, tuple[str, int] | None]) -> Incoming:
    """A whole head, checked: the request it makes (its body still to come), or :class:`Refusal`."""
    version = parser.get_http_version()
    if version != "1.1" and version != "1.0":
        raise Refusal(505, f"HTTP/{version} is not supported: send HTTP/1.1", "version", "http_version_not_supported")
    method = parser.get_method().decode("latin-1")
    if method == "CONNECT":
        raise Refusal(405, "CONNECT is not supported: this is not a proxy", "method", "method_not_allowed")
    hosts, declared, codings, expect = 0, b"", b"", b""
    for name, value in headers:  # one pass for every header the checks read
        if name == b"host":
            hosts += 1
        elif name == b"content-length":
            declared = value
        elif name == b"transfer-encoding":
            codings = value
        elif name == b"expect":
            expect = value
    if hosts != 1 and (hosts or version == "1.1"):
        raise Refusal(400, "an HTTP/1.1 request needs exactly one Host header", "malformed")
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        raise Refusal(400, "malformed request target", "malformed") from None
    raw_path = parsed.path or b"/"
    incoming = Incoming(began, Request(method, raw_path, raw_path.decode("latin-1"), parsed.query or b"", version,
                                       headers, b"", ends[0], ends[1], keep_alive=parser.should_keep_alive()))
    if codings:
        _check_codings(codings)
        incoming.has_body = True
    elif declared:
        length = int(declared)  # the parser lets through one length, of digits only
        if length > max_body:
            raise Refusal(413, f"request body of {length} bytes is over the limit of {max_body} bytes "
                          "(services.conductor.max_body_bytes)", "body_size")
        incoming.has_body = length > 0
    incoming.continue_wanted = incoming.has_body and version == "1.1" and expect.lower() == b"100-continue"
    return incoming


def _check_codings(value: bytes) -> None:
    # RFC 9112 6.1: a request body whose last coding is not chunked has no length (400);
    # codings before it this server does not undo (501).
    codings = [c.strip().lower() for c in value.split(b",")]
    if codings[-1] != b"chunked":
        raise Refusal(400, f"Transfer-Encoding {value[:60]!r} does not end in chunked", "malformed")
    if len(codings) > 1:
        raise Refusal(501, f"Transfer-Encoding {value[:60]!r} is not supported: send the body "
                      "with a Content-Length or only chunked", "malformed", "not_implemented")
