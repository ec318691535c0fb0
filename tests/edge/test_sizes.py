"""Heads too big, in one field or in many: refused as soon as the limit is passed, never read whole first."""

from __future__ import annotations

from tests.edge.raw import AUTH, Client, chat_request
from tests.plugins.stack import Stack

CHUNK = b"a" * 65536
#: 40 MB, the size of the probes that once had the server buffer them whole.
HUGE = 40 * 2**20


def send_until_answered(client: Client, start: bytes) -> tuple[int, bytes]:
    """Send ``start``, then an endless field; returns (bytes sent before the server answered, its answer)."""
    client.send(start)
    client.sock.setblocking(False)
    sent = len(start)
    answer = b""
    try:
        while sent < HUGE:
            try:
                answer = client.sock.recv(65536)
                break
            except BlockingIOError:
                pass
            try:
                sent += client.sock.send(CHUNK)
            except BlockingIOError:
                client.sock.settimeout(0.05)
                try:
                    answer = client.sock.recv(65536)
                    break
                except TimeoutError:
                    client.sock.setblocking(False)
    except (BrokenPipeError, ConnectionResetError):
        pass
    client.sock.settimeout(15)
    while answer and b"\r\n\r\n" not in answer:
        more = client.sock.recv(65536)
        if not more:
            break
        answer += more
    return sent, answer


def test_a_huge_header_value_gets_431_long_before_it_ends(edge: Stack) -> None:
    with Client(edge.url) as client:
        sent, answer = send_until_answered(client, b"GET /v1/models HTTP/1.1\r\nhost: edge\r\n" + AUTH + b"x-big: ")
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    # Answered after the limit and at most a few reads more, never after the 40 MB.
    assert sent < 8 * 2**20, sent


def test_a_huge_request_target_gets_414_long_before_it_ends(edge: Stack) -> None:
    with Client(edge.url) as client:
        sent, answer = send_until_answered(client, b"GET /v1/models?q=")
    assert answer.startswith(b"HTTP/1.1 414 "), answer[:200]
    assert sent < 8 * 2**20, sent


def test_too_many_header_fields_get_431(edge: Stack) -> None:
    many = b"".join(b"h%d: 1\r\n" % i for i in range(6000))  # 40 KB, under the size limit
    with Client(edge.url) as client:
        client.send(b"GET /v1/models HTTP/1.1\r\nhost: edge\r\n" + AUTH + many + b"\r\n")
        answer = client.answer()
        assert answer.status == 431 and "max_headers" in answer.json()["error"]["message"]
        assert client.closed()


def test_a_request_within_the_limits_is_served(edge: Stack) -> None:
    fields = b"".join(b"x-f%d: %s\r\n" % (i, b"v" * 500) for i in range(90))  # 90 fields, 45 KB
    with Client(edge.url) as client:
        client.send(chat_request(extra=fields))
        assert client.answer().status == 200
