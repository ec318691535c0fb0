"""HTTP/1.1 as the server speaks it: ambiguous framing refused, 100 Continue in its place, upgrades declined.

Each case is what a client (or an attacker) really sends; the server's answer and whether it
closed the connection are checked byte for byte.
"""

from __future__ import annotations

import pytest

from tests.edge.raw import AUTH, Client, chat_body, chat_request
from tests.plugins.stack import Stack

MODELS = b"GET /v1/models HTTP/1.1\r\nhost: edge\r\n" + AUTH
CHAT_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-type: application/json\r\n" + AUTH


def one(stack: Stack, data: bytes) -> tuple[int, bool, bytes]:
    """Send ``data`` on a new connection: (status of the first answer, whether the server then closed, its head)."""
    with Client(stack.url) as client:
        client.send(data)
        answer = client.answer()
        return answer.status, client.closed(), answer.head


@pytest.mark.parametrize("framing", [
    b"content-length: 5\r\ntransfer-encoding: chunked\r\n",
    b"transfer-encoding: chunked\r\ncontent-length: 5\r\n",
    b"transfer-encoding : chunked\r\n",
    b"transfer-encoding: xchunked\r\n",
    b"transfer-encoding: chunked, identity\r\n",
    b"transfer-encoding: chunked\r\ntransfer-encoding: identity\r\n",
    b"transfer-encoding:\tchunked\r\n\tfolded\r\n",
    b"content-length: 5\r\ncontent-length: 6\r\n",
    b"content-length: 5, 5\r\n",
    b"content-length: +5\r\n",
], ids=["cl-te", "te-cl", "te-space", "xchunked", "chunked-identity", "two-te", "folded", "two-cl", "cl-list",
        "cl-sign"])
def test_ambiguous_body_framing_is_refused_and_the_connection_closed(edge: Stack, framing: bytes) -> None:
    status, closed, _ = one(edge, CHAT_HEAD + framing + b"\r\n0\r\n\r\n")
    assert status == 400 and closed


def test_a_transfer_coding_other_than_chunked_is_501(edge: Stack) -> None:
    status, closed, _ = one(edge, CHAT_HEAD + b"transfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
    assert status == 501 and closed


# -- 100 Continue -------------------------------------------------------------------------


def test_no_100_continue_before_the_key_is_checked(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\nexpect: 100-continue\r\n"
                    b"content-length: 100\r\n\r\n")
        answer = client.answer()
        assert answer.status == 401 and answer.headers[b"connection"] == b"close"
        assert client.closed()


def test_100_continue_goes_to_an_http_1_1_client_with_the_key_then_its_answer(edge: Stack) -> None:
    body = chat_body()
    with Client(edge.url) as client:
        client.send(CHAT_HEAD + b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body))
        assert client.interim() == b"HTTP/1.1 100 Continue"
        client.send(body)
        assert client.answer().status == 200


def test_an_http_1_0_client_gets_no_100_continue(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(CHAT_HEAD.replace(b"HTTP/1.1", b"HTTP/1.0") + b"expect: 100-continue\r\ncontent-length: 10\r\n\r\n")
        assert client.answer().status == 408  # the body it was to send without waiting never came


def test_no_100_continue_for_a_request_without_a_body(edge: Stack) -> None:
    status, _, head = one(edge, MODELS + b"expect: 100-continue\r\n\r\n")
    assert status == 200 and b"100 Continue" not in head


def test_100_continue_for_a_request_behind_a_stream_comes_after_that_stream(edge: Stack) -> None:
    # The second request's head arrives while the first one's answer streams: its 100
    # Continue must not land inside the stream's chunks, nor before the stream's head.
    stream, body = chat_body(max_tokens=200, stream=True), chat_body()
    with Client(edge.url) as client:
        client.send(CHAT_HEAD + b"content-length: %d\r\n\r\n" % len(stream) + stream)
        client._until(b"data: ")  # the stream has begun
        client.buffer = b"data: " + client.buffer
        client.send(CHAT_HEAD + b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body))
        client.buffer = b""  # the rest of the stream follows: read it by its chunks
        streamed = client.rest_of_stream()
        assert b"HTTP/1.1" not in streamed and streamed.rstrip().endswith(b"data: [DONE]")
        assert client.interim() == b"HTTP/1.1 100 Continue"
        client.send(body)
        assert client.answer().status == 200


# -- upgrades, versions, Host ---------------------------------------------------------------

H2C = b"connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"


def test_an_h2c_upgrade_is_answered_as_http_1_1_and_the_connection_goes_on(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(MODELS + H2C + b"\r\n")
        answer = client.answer()
        assert answer.status == 200 and b"upgrade" not in answer.headers
        client.send(MODELS + b"\r\n")
        assert client.answer().status == 200


def test_an_h2c_upgrade_with_a_body_keeps_the_body(edge: Stack) -> None:
    # What `curl --http2 -d ...` sends: the parser skips such a body; the server must not.
    with Client(edge.url) as client:
        client.send(chat_request(extra=H2C) + MODELS + b"\r\n")
        assert client.answer().status == 200
        assert client.answer().status == 200


def test_an_upgrade_with_a_chunked_body_is_refused(edge: Stack) -> None:
    status, closed, _ = one(edge, CHAT_HEAD + H2C + b"transfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
    assert status == 400 and closed


def test_bytes_after_a_connection_close_request_do_not_drop_its_answer(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(MODELS + b"connection: close\r\n\r\n" + MODELS + b"\r\nsome trailing garbage")
        answer = client.answer()
        assert answer.status == 200 and answer.headers[b"connection"] == b"close"
        assert answer.json()["data"]
        assert client.closed()


@pytest.mark.parametrize(("line", "status"), [
    (b"GET /health HTTP/1.0\r\n\r\n", 200),
    (b"GET /health HTTP/0.9\r\n\r\n", 505),
    (b"GET /health HTTP/2.0\r\nhost: edge\r\n\r\n", 505),
])
def test_the_status_line_is_always_http_1_1(edge: Stack, line: bytes, status: int) -> None:
    got, _, head = one(edge, line)
    assert got == status and head.startswith(b"HTTP/1.1 %d " % status)


@pytest.mark.parametrize(("head", "status"), [
    (b"GET /health HTTP/1.1\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n", 400),
    (b"GET /health HTTP/1.0\r\n\r\n", 200),
])
def test_http_1_1_needs_exactly_one_host(edge: Stack, head: bytes, status: int) -> None:
    assert one(edge, head)[0] == status


def test_connect_is_refused(edge: Stack) -> None:
    status, closed, _ = one(edge, b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n" + AUTH + b"\r\n")
    assert status == 405 and closed


def test_head_on_syshaxds_own_route_has_no_body_and_the_connection_goes_on(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(b"HEAD /health HTTP/1.1\r\nhost: edge\r\n\r\nGET /health HTTP/1.1\r\nhost: edge\r\n\r\n")
        head = client.answer(head_only=True)
        # Served like GET, or refused (405: FastAPI's routes did): a body follows neither.
        assert head.status in (200, 405) and int(head.headers[b"content-length"]) > 0
        assert client.answer().json()["status"] == "ok"  # the next answer, not a body of the HEAD


def test_head_on_a_passed_through_route_is_answered_without_a_body_and_without_hanging(edge: Stack) -> None:
    with Client(edge.url, timeout=5.0) as client:
        client.send(b"HEAD /version HTTP/1.1\r\nhost: edge\r\n" + AUTH + b"\r\nGET /health HTTP/1.1\r\nhost: edge\r\n\r\n")
        assert client.answer(head_only=True).status == 200
        assert client.answer().json()["status"] == "ok"


def test_nothing_follows_an_answer_whose_end_is_the_close(edge: Stack) -> None:
    # A stream to an HTTP/1.0 client ends when the connection does, even one that asked to be
    # kept alive: a request pipelined behind it must not be answered into that body.
    stream = chat_body(max_tokens=20, stream=True)
    with Client(edge.url) as client:
        client.send(CHAT_HEAD.replace(b"HTTP/1.1", b"HTTP/1.0") + b"connection: keep-alive\r\n"
                    + b"content-length: %d\r\n\r\n" % len(stream) + stream + MODELS + b"\r\n")
        answer = client.answer()
        assert answer.status == 200 and answer.headers[b"connection"] == b"close"
        assert b"HTTP/1.1" not in answer.body and answer.body.rstrip().endswith(b"data: [DONE]")
