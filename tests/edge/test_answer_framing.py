"""What the server writes: the status line, the headers it lets through, and bodies only where HTTP has them."""

from __future__ import annotations

import pytest

from syshaxd.api.headers import header_lines
from syshaxd.api.response import Response
from tests.edge.wire import Wire


def answer(status: int, headers: list[tuple[bytes, bytes]], body: bytes = b"", length: int | None = None,
           **kwargs: bool) -> Wire:
    wire = Wire()
    response = Response(wire, keep_alive=True, **kwargs)
    response.start(status, headers, length)
    response.write(body)
    response.end()
    return wire


def test_values_with_cr_lf_or_nul_and_names_that_are_not_tokens_are_never_written() -> None:
    lines = header_lines([(b"x-ok", b"fine"), (b"x-split", b"a\r\nset-cookie: evil=1"), (b"x-nul", b"a\x00b"),
                          (b"x-lf", b"a\nb"), (b"bad name", b"v"), (b"x:colon", b"v"), (b"", b"v"),
                          (b"x-obs", b"caf\xc3\xa9")])
    assert lines == [b"x-ok: fine\r\n", b"x-obs: caf\xc3\xa9\r\n"]


def test_hop_by_hop_headers_and_those_connection_names_are_dropped() -> None:
    lines = header_lines([(b"connection", b"keep-alive, X-Private"), (b"x-private", b"1"), (b"keep-alive", b"5"),
                          (b"transfer-encoding", b"chunked"), (b"upgrade", b"h2c"), (b"content-length", b"3"),
                          (b"te", b"trailers"), (b"trailer", b"x"), (b"proxy-connection", b"x"), (b"x-kept", b"1")])
    assert lines == [b"x-kept: 1\r\n"]


def test_the_status_line_is_http_1_1_for_an_http_1_0_client_whose_body_ends_with_the_close() -> None:
    wire = answer(200, [(b"content-type", b"text/plain")], b"hello", http10=True)
    assert wire.data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"transfer-encoding" not in wire.data and b"connection: close\r\n" in wire.data
    assert wire.data.endswith(b"\r\n\r\nhello")


def test_an_http_1_0_client_kept_alive_is_told_so() -> None:
    wire = answer(200, [], b"hi", length=2, http10=True)
    assert b"connection: keep-alive\r\n" in wire.data and b"content-length: 2\r\n" in wire.data


@pytest.mark.parametrize("status", [204, 304])
def test_204_and_304_carry_no_body_and_keep_the_connection(status: int) -> None:
    wire = answer(status, [(b"etag", b'"x"')], b"must not be sent", length=16 if status == 304 else None)
    head, _, rest = wire.data.partition(b"\r\n\r\n")
    assert rest == b"" and b"transfer-encoding" not in head and b"connection: close" not in head
    assert (b"content-length: 16" in head) == (status == 304)
    assert wire.done


def test_head_gets_the_head_only_and_a_chunked_answer_no_terminator() -> None:
    wire = answer(200, [], b"body", head_only=True)
    assert wire.data.endswith(b"\r\n\r\n") and b"body" not in wire.data and b"0\r\n\r\n" not in wire.data


def test_a_1xx_is_an_interim_answer_and_the_final_one_follows() -> None:
    wire = Wire()
    response = Response(wire, keep_alive=True)
    response.start(103, [(b"link", b"</a>; rel=preload")])
    response.start(200, [], 2)
    response.write(b"ok")
    response.end()
    assert wire.data == (b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n"
                         b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")


def test_101_and_any_1xx_to_an_http_1_0_client_are_not_written() -> None:
    for status, http10 in ((101, False), (103, True)):
        wire = Wire()
        Response(wire, keep_alive=True, http10=http10).start(status, [])
        assert wire.data == b""


def test_an_answer_that_ends_before_it_began_drops_the_connection() -> None:
    wire = Wire()
    Response(wire, keep_alive=True).end()
    assert wire.aborted and not wire.done and wire.data == b""


def test_first_and_last_bytes_go_with_the_head_and_the_end() -> None:
    wire = Wire()
    response = Response(wire, keep_alive=True)
    writes: list[bytes] = []
    wire.write = writes.append  # type: ignore[method-assign]
    response.start(200, [], None, b"data: 1\n\n")
    response.end(b"data: [DONE]\n\n")
    assert len(writes) == 2
    assert writes[0].endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n")
    assert writes[1] == b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
