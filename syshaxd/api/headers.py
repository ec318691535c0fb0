"""The header lines the API server writes: only what belongs to the answer, and only what is well formed.

Whatever a route hands the server (its own headers, or an engine's it relays), the framing is
the server's own (length or chunks, and whether the connection stays open), so the hop-by-hop
headers (RFC 9110 7.6.1) and those a ``Connection`` header names are dropped. A name that is
not a token or a value with CR, LF or NUL would let a header end early and another begin
(response splitting): such a header is dropped and logged, never written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

log = logging.getLogger("syshaxd.api")

#: Headers about one connection, not the answer; the server writes its own framing.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"transfer-encoding",
                        b"upgrade", b"content-length"})
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
#: Names already found to be tokens (the same few come with every answer); bounded, since a
#: relayed engine chooses them.
_known: set[bytes] = set()
_KNOWN_MAX = 1024


def header_lines(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """``name: value`` lines (CRLF-terminated) for ``headers``, without hop-by-hop or malformed ones."""
    lines: list[bytes] = []
    named: frozenset[bytes] | None = None
    for name, value in headers:
        if name in HOP_BY_HOP:
            if name == b"connection":
                named = _named(value, named)
            continue
        if name not in _known and not _valid_name(name):
            log.warning("dropped a response header with a malformed name: %r", name[:100])
            continue
        if _BAD_VALUE.search(value) is not None:
            log.warning("dropped response header %r: its value holds CR, LF or NUL", name[:100])
            continue
        lines.append(b"%s: %s\r\n" % (name, value))
    if named:
        lines = [line for line in lines if line.split(b":", 1)[0].lower() not in named]
    return lines


def _valid_name(name: bytes) -> bool:
    if _TOKEN.fullmatch(name) is None:
        return False
    if len(_known) < _KNOWN_MAX:
        _known.add(name)
    return True


def _named(value: bytes, before: frozenset[bytes] | None) -> frozenset[bytes]:
    """The header names a ``Connection`` value lists (they are hop-by-hop too)."""
    names = frozenset(token.strip().lower() for token in value.split(b",") if token.strip())
    return names | before if before else names
