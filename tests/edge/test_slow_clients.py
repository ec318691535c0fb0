"""Clients that take their time, or never read: the server bounds what each holds, and serves the others.

A real daemon (API key set, ``head_timeout`` 1 s, ``body_timeout`` 2 s), raw sockets. Each
test asserts what the server did -- 408 and close, the connection closed, a body never read,
a well-behaved client answered meanwhile -- never how long it took.
"""

from __future__ import annotations

import time

from tests.edge.raw import AUTH, Client, chat_body, chat_request, push_until_refused, rss_mb
from tests.plugins.stack import Stack
from tests.probe import wait_until


def served(stack: Stack, source: str = "127.0.0.1") -> bool:
    """A well-behaved client, on a new connection, gets its chat completion."""
    with Client(stack.url, source) as client:
        client.send(chat_request())
        return client.answer().status == 200


def refused_count(stack: Stack, reason: str) -> float:
    """syshax_http_requests_refused_total{reason}."""
    return stack.metric("syshax_http_requests_refused_total", reason=reason)


def test_one_byte_of_a_request_line_gets_408_and_close(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(b"P")
        answer = client.answer()
        assert answer.status == 408 and answer.headers[b"connection"] == b"close"
        assert "head_timeout" in answer.json()["error"]["message"]
        assert client.closed()
    assert served(edge)


def test_a_head_trickled_a_byte_at_a_time_times_out_from_its_first_byte(edge: Stack) -> None:
    # Each byte comes well within the head timeout of the one before: a timer that restarted
    # with every byte would never fire. The head's timer counts from its first byte.
    before = refused_count(edge, "head_timeout")
    with Client(edge.url) as client:
        client.send(b"GET /v1/models HTTP/1.1\r\nhost: edge\r\n" + AUTH)
        client.sock.settimeout(0.05)
        answered = b""
        for _ in range(2000):  # far more bytes than the timeout lets through
            try:
                client.send(b"x")
                answered = client.sock.recv(65536)
                break
            except TimeoutError:
                time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                break
        assert answered.startswith(b"HTTP/1.1 408 "), answered[:200]
    assert wait_until(lambda: refused_count(edge, "head_timeout") > before)


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(edge: Stack) -> None:
    with Client(edge.url) as client:
        assert client.closed()
        assert client.buffer == b""


def test_a_head_with_no_body_after_it_gets_408_and_close(edge: Stack) -> None:
    before = refused_count(edge, "body_timeout")
    with Client(edge.url) as client:
        client.send(chat_request(body=chat_body())[:-5])  # the head and most of the body
        answer = client.answer()
        assert answer.status == 408 and "body_timeout" in answer.json()["error"]["message"]
        assert client.closed()
    assert refused_count(edge, "body_timeout") == before + 1
    assert served(edge)


def test_a_body_that_keeps_coming_is_not_cut(edge: Stack) -> None:
    # Pieces a fraction of body_timeout apart, for longer than the head timeout in all:
    # the body timer runs between reads, not over the whole body.
    body = chat_body()
    with Client(edge.url) as client:
        client.send(chat_request(body=body)[:-len(body)])
        for i in range(0, len(body), 8):
            client.send(body[i:i + 8])
            time.sleep(0.1)
        assert client.answer().status == 200


def test_without_the_key_a_body_is_refused_before_a_byte_of_it_is_read(edge: Stack) -> None:
    # Slow bodies from clients without the key cost nothing: 401 on the head, then close.
    clients = [Client(edge.url) for _ in range(8)]
    try:
        for client in clients:
            client.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-length: %d\r\n\r\n" % (4 * 2**20))
        for client in clients:
            answer = client.answer()
            assert answer.status == 401 and answer.headers[b"connection"] == b"close"
            assert client.closed()
    finally:
        for client in clients:
            client.close()


def test_syshaxds_open_routes_take_no_body_from_a_client_without_the_key(edge: Stack) -> None:
    # /health and the docs need no key (probes, Prometheus): a body there is refused on its head.
    with Client(edge.url) as client:
        client.send(b"POST /health HTTP/1.1\r\nhost: edge\r\ncontent-length: %d\r\n\r\n" % (4 * 2**20))
        answer = client.answer()
        assert answer.status == 413 and answer.headers[b"connection"] == b"close"
        assert client.closed()
    with Client(edge.url) as client:
        client.send(b"GET /health HTTP/1.1\r\nhost: edge\r\ncontent-length: 0\r\n\r\n")
        assert client.answer().status == 200


def test_slow_bodies_with_the_key_are_timed_out_and_others_served_meanwhile(edge: Stack) -> None:
    before = refused_count(edge, "body_timeout")
    clients = [Client(edge.url) for _ in range(6)]
    try:
        for client in clients:
            client.send(b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-type: application/json\r\n"
                        + AUTH + b"content-length: %d\r\n\r\n" % (4 * 2**20) + b" " * (2**20))
        assert served(edge)  # while six bodies hang
        for client in clients:
            assert client.answer().status == 408
            assert client.closed()
    finally:
        for client in clients:
            client.close()
    assert refused_count(edge, "body_timeout") == before + 6


def test_pipelined_requests_never_read_do_not_grow_the_daemon(edge: Stack) -> None:
    # GET /openapi.json needs no key: an anonymous client pipelines it without ever reading
    # the ~10 KB answers. The server answers what it read ahead, stops reading, and closes.
    request = b"GET /openapi.json HTTP/1.1\r\nhost: edge\r\n\r\n" * 400
    before = rss_mb(edge.daemon.pid)
    with Client(edge.url) as attacker:
        sent, _ = push_until_refused(attacker, request, 2 * 2**20)
        assert served(edge)  # while the attacker's connection is open
        grown = rss_mb(edge.daemon.pid) - before
        answers = answered_then_closed(attacker)
    # 2 MB of these requests ask for ~500 MB of answers: a server that read them all while
    # its answers went unread would hold most of that. This one reads ahead 16, answers
    # them, and closes (a reset may take the answers the attacker never read with it).
    assert grown < 32, f"daemon grew {grown:.0f} MB while {sent / 2**20:.1f} MB of requests were pushed"
    assert answers is not None and answers <= 16, answers


def answered_then_closed(client: Client, most: int = 8 * 2**20) -> int | None:
    """How many answers came before the server closed (None: it did not close within ``most`` bytes)."""
    client.sock.settimeout(15)
    data = b""
    try:
        while len(data) < most:
            chunk = client.sock.recv(65536)
            if not chunk:
                return data.count(b"HTTP/1.1 200 ")
            data += chunk
    except ConnectionResetError:
        return data.count(b"HTTP/1.1 200 ")
    return None


def test_a_pipelining_client_past_the_read_ahead_gets_those_answers_in_order_then_a_close(edge: Stack) -> None:
    with Client(edge.url) as client:
        client.send(b"".join(b"GET /health?n=%d HTTP/1.1\r\nhost: edge\r\n\r\n" % i for i in range(40)))
        answers = [client.answer()]
        while answers[-1].headers.get(b"connection") != b"close":
            answers.append(client.answer())
        assert 1 <= len(answers) < 40  # the rest the client sends again, as RFC 9112 9.3.2 expects
        assert all(a.status == 200 for a in answers)
        assert answers[-1].headers[b"connection"] == b"close"
        assert client.closed()
