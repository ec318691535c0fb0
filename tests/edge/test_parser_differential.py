"""The server's parsing against a reference parser (h11), on generated requests.

Hypothesis builds requests from parts (method, target, version, line ends, header fields,
Host, body framing), each part sometimes well formed and sometimes not; every request goes
to the real server (its reader, limits and checks; an echo route) on its own connection and
to h11 as a server. Where h11 takes the request, the server must take it too, and see the same
method, path and body length; where h11 refuses it, the server must refuse it.

The deliberate differences, each stricter than h11 or what RFC 9112 asks, except the last
two (which RFC 9112 allows):

- a bare LF as a line end (RFC 9112 2.2 lets a server accept it; a proxy in front that does
  not would frame the message differently) -- refused;
- a method llhttp does not know, or in lower case (h11 takes any token) -- refused, 400;
- CONNECT (this is not a proxy) -- refused, 405;
- an HTTP version other than 1.0 and 1.1 (h11 takes any digit.digit) -- refused, 505 (400
  where llhttp already refuses the version);
- obs-fold, a header continued on the next line (RFC 9112 5.2 allows refusing it) -- refused;
- a control character other than HTAB in a field value (0x01-0x1F, DEL: none is a
  field-vchar; h11 refuses only NUL, CR and LF) -- refused;
- Content-Length given twice with the same value (RFC 9110 8.6 allows taking it) -- refused;
- Content-Length beside Transfer-Encoding (h11 lets chunked win; RFC 9112 6.3 allows refusing
  what is the shape of request smuggling) -- refused;
- whitespace after a chunk size -- refused;
- an origin-form target that does not start with "/" -- refused;
- an empty line before the request line -- taken (RFC 9112 2.2: SHOULD be ignored), h11 refuses;
- two spaces between the parts of the request line -- taken (RFC 9112 3 lets a server split
  on whitespace), h11 refuses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import h11
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from syshaxd.config import EdgeLimits
from tests.edge.inprocess import echo_server
from tests.edge.raw import Client

FUZZ = settings(max_examples=300, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
#: Parts h11 takes and the server refuses.
REFUSED_HERE = frozenset({"bare-lf", "method", "connect", "version", "obs-fold", "ctl", "cl-twice", "cl-te",
                          "chunk-space", "no-slash"})
#: Parts h11 refuses and the server takes.
TAKEN_HERE = frozenset({"leading-crlf", "double-space"})

KNOWN_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
TARGET_CHARS = st.sampled_from(list("abcXYZ019-._~!$&'()*+,;=:@%/?") + ["\x00", "\x7f", "\xff", "\t", "#", '"'])
VALUE_CHARS = st.sampled_from(list("abc XYZ019-;=,/\"()") + ["\t", "\x00", "\x01", "\x80", "\xff", "\r", "\n"])
NAME = st.sampled_from(["x-a", "X-Bb", "accept", "user-agent", "x_c", "x-a", "", "x a", "x:a", "x\xff", "x\x00"])


@dataclass
class Generated:
    """A request's bytes, and the deliberate differences it holds."""

    data: bytes
    parts: set[str] = field(default_factory=set)


@st.composite
def requests(draw: st.DrawFn) -> Generated:  # noqa: C901 - one branch per part, read top to bottom
    """A request assembled from parts, each part well formed or not."""
    parts: set[str] = set()
    method = draw(st.sampled_from([*KNOWN_METHODS * 3, "get", "FOO", "CONNECT"]))
    if method == "CONNECT":
        parts.add("connect")
    elif method not in KNOWN_METHODS:
        parts.add("method")
    target = "/" + draw(st.text(TARGET_CHARS, max_size=12))
    if draw(st.integers(0, 20)) == 0:
        target = target[1:] or "a"
        parts.add("no-slash")
    version = draw(st.sampled_from(["HTTP/1.1"] * 6 + ["HTTP/1.0"] * 2 + ["HTTP/2.0", "HTTP/1.2", "HTTP/11",
                                                                              "http/1.1", "HTTP/1."]))
    if version in ("HTTP/2.0", "HTTP/1.2"):
        parts.add("version")
    eol = "\n" if draw(st.integers(0, 15)) == 0 else "\r\n"
    if eol == "\n":
        parts.add("bare-lf")
    sep = "  " if draw(st.integers(0, 20)) == 0 else " "
    if sep == "  ":
        parts.add("double-space")
    lines = [f"{method}{sep}{target} {version}"]
    hosts = draw(st.sampled_from([1] * 6 + [0, 2]))
    lines += ["Host: example"] * hosts
    for _ in range(draw(st.integers(0, 4))):
        value = draw(st.text(VALUE_CHARS, max_size=10))
        parts |= _value_parts(value)
        lines.append(f"{draw(NAME)}: {value}")
    if draw(st.integers(0, 20)) == 0:
        lines.append(" folded")
        parts.add("obs-fold")
    body = draw(st.binary(max_size=20))
    framing = draw(st.sampled_from(["none"] * 3 + ["length"] * 3 + ["chunked"] * 2 + ["cl-twice", "cl-te",
                                                                                           "chunk-space"]))
    payload = ""
    if framing in ("length", "cl-twice"):
        lines += [f"Content-Length: {len(body)}"] * (2 if framing == "cl-twice" else 1)
        payload = body.decode("latin-1")
    elif framing in ("chunked", "cl-te", "chunk-space"):
        lines.append("Transfer-Encoding: chunked")
        if framing == "cl-te":
            lines.append(f"Content-Length: {len(body)}")
        space = " " if framing == "chunk-space" else ""
        payload = (f"{len(body):x}{space}\r\n{body.decode('latin-1')}\r\n" if body else "") + "0\r\n\r\n"
    if framing in ("cl-twice", "cl-te", "chunk-space") and (framing != "chunk-space" or body):
        parts.add(framing)
    head = eol.join(lines) + eol + eol
    if draw(st.integers(0, 20)) == 0:
        head = "\r\n" + head
        parts.add("leading-crlf")
    return Generated((head + payload).encode("latin-1"), parts)


def _value_parts(value: str) -> set[str]:
    """The listed differences a field value brings (a CR or LF in it ends its line early)."""
    parts = {"ctl"} if any(c == "\x7f" or ("\x01" <= c < " " and c not in "\t\r\n") for c in value) else set()
    for i, char in enumerate(value):
        if char == "\n" and (i == 0 or value[i - 1] != "\r"):
            parts.add("bare-lf")
        if char == "\n" and value[i + 1:i + 2] in (" ", "\t"):
            parts.add("obs-fold")
    return parts


@dataclass
class Verdict:
    """Whether a parser took the request, and what it saw."""

    taken: bool
    seen: tuple[str, bytes, int] | None = None  # method, path, body length
    why: str = ""


def h11_verdict(data: bytes) -> Verdict | None:
    """h11 as a server; None when it waits for more."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    method, target, length = "", b"", 0
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Request):
                method, target = event.method.decode(), bytes(event.target)
            elif isinstance(event, h11.Data):
                length += len(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return Verdict(True, (method, target.split(b"?", 1)[0].split(b"#", 1)[0], length))
    except h11.RemoteProtocolError as exc:
        return Verdict(False, why=str(exc))


def server_verdict(url: str, data: bytes) -> Verdict | None:
    """The server's; None when it waited for more (408)."""
    with Client(url, timeout=10) as client:
        try:
            client.send(data)
            answer = client.answer()
        except (EOFError, ConnectionResetError, BrokenPipeError):
            return Verdict(False, why="closed")
    if answer.status == 408:
        return None
    if answer.status != 200:
        return Verdict(False, why=f"{answer.status} {answer.body[:120]!r}")
    method, target, length = answer.body.rsplit(b" ", 2)
    return Verdict(True, (method.decode(), target.split(b"?", 1)[0], int(length)))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The API server with an echo route; heads and bodies time out in a second."""
    with echo_server(EdgeLimits(head_timeout=1.0, body_timeout=1.0)) as url:
        yield url


@FUZZ
@given(request=requests())
def test_the_server_takes_and_refuses_what_h11_does_but_the_listed_differences(
        server: str, request: Generated) -> None:
    reference = h11_verdict(request.data)
    ours = server_verdict(server, request.data)
    if request.parts & REFUSED_HERE:
        assert ours is not None and not ours.taken, (request, ours)
        return
    if request.parts & TAKEN_HERE:
        assume(reference is not None and not reference.taken)
        return  # h11 refused only for a part RFC 9112 lets a server take; the server's own checks ran
    assume(reference is not None)  # a request h11 still waits on (a body shorter than announced)
    assert ours is not None, (request, reference)
    assert ours.taken == reference.taken, (request, reference, ours)
    if ours.taken and b"#" not in request.data.split(b"\n", 1)[0] and b"http" not in request.data[:12]:
        assert ours.seen == reference.seen, (request, reference, ours)


@pytest.mark.parametrize(("data", "taken"), [
    (b"GET / HTTP/1.1\nHost: a\n\n", False),
    (b"get / HTTP/1.1\r\nHost: a\r\n\r\n", False),
    (b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\n", False),
    (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", False),
    (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", False),
    (b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\x01\r\n\r\n", False),
    (b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", False),
    (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n", False),
    (b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n0\r\n\r\n", False),
    (b"GET a HTTP/1.1\r\nHost: a\r\n\r\n", False),
    (b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", True),
    (b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", True),
], ids=["bare-lf", "method", "connect", "version", "obs-fold", "ctl", "cl-twice", "cl-te", "chunk-space", "no-slash",
        "leading-crlf", "double-space"])
def test_each_listed_difference_from_h11_is_as_documented(server: str, data: bytes, taken: bool) -> None:
    reference, ours = h11_verdict(data), server_verdict(server, data)
    assert reference is not None and reference.taken != taken, reference
    assert ours is not None and ours.taken == taken, ours
