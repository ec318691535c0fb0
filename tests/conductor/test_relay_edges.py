"""The one relay at the edges of HTTP: HEAD, interim and bodiless answers, hop-by-hop headers, and
an answer that breaks after its first byte, through a real daemon in front of an engine that
answers exactly what each test needs."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from syshaxd.conductor import end_to_end
from tests.plugins.fake_vllm import FakeVllm
from tests.plugins.stack import Stack

PAGE = b'{"page": "x"}'
SSE = b"data: {\"n\": 1}\n\n"


class EdgeEngine:
    """A vLLM-looking engine (health, metrics, models) whose other routes answer raw bytes, and
    which records every request: method, path, headers, and the port it came from."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str], int]] = []
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                engine.answer(self)

            do_HEAD = do_POST = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, h: BaseHTTPRequestHandler) -> None:
        """What each path answers."""
        length = int(h.headers.get("Content-Length") or 0)
        if length:
            h.rfile.read(length)
        with self._lock:
            self.seen.append((h.command, h.path, {k.lower(): v for k, v in h.headers.items()}, h.client_address[1]))
        raw = self.raw(h.command, h.path)
        h.wfile.write(raw)
        h.wfile.flush()
        if h.path.startswith("/cut"):
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)

    def raw(self, method: str, path: str) -> bytes:
        """The bytes of the answer to ``method path``."""
        if path == "/health":
            return b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
        if path == "/metrics":
            text = FakeVllm.METRICS.encode()
            return b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text)
        if path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "ds-32b", "object": "model"}]}).encode()
            return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
                len(body), body)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(PAGE)
        sse = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        answers = {
            "/page": head + (b"" if method == "HEAD" else PAGE),
            "/hints": b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n" + head + PAGE,
            "/empty": b"HTTP/1.1 204 No Content\r\nx-kept: yes\r\n\r\n",
            "/same": b"HTTP/1.1 304 Not Modified\r\netag: \"v1\"\r\n\r\n",
            "/hop": (b"HTTP/1.1 200 OK\r\nconnection: x-secret, keep-alive\r\nkeep-alive: timeout=5\r\n"
                     b"x-secret: engine-only\r\nx-kept: yes\r\ncontent-length: 2\r\n\r\nok"),
            "/cut-between": sse + b"%x\r\n%s\r\n" % (len(SSE), SSE),
            "/cut-inside": sse + b"%x\r\n%s\r\n" % (len(SSE) + 9, SSE + b"data: {\"n"),
            "/cut-body": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"half\":",
        }
        return answers.get(path, b"HTTP/1.1 404 Not Found\r\ncontent-length: 22\r\n\r\n{\"detail\":\"Not Found\"}")

    def close(self) -> None:
        """Stop serving and free the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def engine() -> Iterator[EdgeEngine]:
    made = EdgeEngine()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def stack(make_module_stack: Callable[..., Stack], engine: EdgeEngine) -> Stack:
    return make_module_stack(policy="gpu-only", engine_ports=(engine.port, engine.port))


def exchange(stack: Stack, raw: bytes, methods: list[str]) -> list[httpx.Response]:
    """Send raw requests on one connection; read one answer per request (a HEAD's has no body,
    the others are as long as their content-length says)."""
    host, port = stack.url.removeprefix("http://").split(":")
    answers: list[httpx.Response] = []
    data = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        for method in methods:
            while b"\r\n\r\n" not in data:
                data += _more(sock, data)
            head, _, data = data.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(b":") for line in lines[1:])]
            length = 0 if method == "HEAD" else int(dict(headers).get(b"content-length", b"0"))
            while len(data) < length:
                data += _more(sock, data)
            body, data = data[:length], data[length:]
            answers.append(httpx.Response(int(lines[0].split()[1]), headers=headers, content=body))
    return answers


def _more(sock: socket.socket, data: bytes) -> bytes:
    chunk = sock.recv(65536)
    assert chunk, f"the daemon closed the connection after {data!r}"
    return chunk


def test_head_on_a_pass_through_route_ends_with_its_headers_and_the_connections_go_on(
        stack: Stack, engine: EdgeEngine) -> None:
    before = len(engine.seen)
    head, get = exchange(stack, b"HEAD /page HTTP/1.1\r\nhost: x\r\n\r\nGET /page HTTP/1.1\r\nhost: x\r\n\r\n",
                         ["HEAD", "GET"])
    assert head.status_code == 200 and head.headers["content-length"] == str(len(PAGE)) and head.content == b""
    assert get.status_code == 200 and get.content == PAGE
    (m1, p1, _, port1), (m2, p2, _, port2) = [s for s in engine.seen[before:] if s[1] == "/page"]
    assert (m1, p1, m2, p2) == ("HEAD", "/page", "GET", "/page")
    assert port1 == port2  # the engine connection outlived the HEAD: its parser did not wait for a body
    log = stack.log_text()
    assert "HEAD /page engine=gpu0 outcome=ok" in log and "HEAD /page engine=gpu0 outcome=client_disconnect" not in log


def test_an_interim_answer_is_read_past(stack: Stack) -> None:
    r = httpx.get(f"{stack.url}/hints", timeout=10)
    assert r.status_code == 200 and r.content == PAGE


@pytest.mark.parametrize("path,status", [("/empty", 204), ("/same", 304)])
def test_bodiless_answers_come_back_without_a_body(stack: Stack, path: str, status: int) -> None:
    with httpx.Client(timeout=10) as client:
        r = client.get(f"{stack.url}{path}")
        assert r.status_code == status and r.content == b""
        assert client.get(f"{stack.url}/page").content == PAGE  # and nothing waits on them


def test_hop_by_hop_headers_and_those_connection_names_stay_on_their_hop(stack: Stack, engine: EdgeEngine) -> None:
    r = httpx.get(f"{stack.url}/hop", timeout=10, headers={
        "Connection": "keep-alive, X-Private", "X-Private": "client-only", "Keep-Alive": "timeout=9",
        "TE": "trailers", "Proxy-Authorization": "Basic eA==", "X-Public": "yes"})
    assert r.status_code == 200 and r.content == b"ok"
    assert r.headers["x-kept"] == "yes"
    assert "x-secret" not in r.headers and "keep-alive" not in r.headers
    _, _, sent, _ = next(s for s in reversed(engine.seen) if s[1] == "/hop")
    assert sent["x-public"] == "yes"
    for name in ("x-private", "keep-alive", "te", "proxy-authorization"):
        assert name not in sent, name
    assert "connection" not in sent


def test_a_stream_broken_between_events_ends_with_an_error_event(stack: Stack) -> None:
    with httpx.stream("GET", f"{stack.url}/cut-between", timeout=10) as r:
        body = r.read()  # a clean end: the chunked body is terminated
    events = [line for line in body.decode().splitlines() if line.startswith("data:")]
    assert events[0] == 'data: {"n": 1}' and events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert error["type"] == "upstream_error" and "gpu0 failed mid-stream" in error["message"]
    assert error["code"] == "502"


@pytest.mark.parametrize("path", ["/cut-inside", "/cut-body"])
def test_an_answer_broken_anywhere_else_is_cut_not_passed_for_whole(stack: Stack, path: str) -> None:
    with pytest.raises(httpx.RemoteProtocolError), httpx.stream("GET", f"{stack.url}{path}", timeout=10) as r:
        r.read()
    assert httpx.get(f"{stack.url}/page", timeout=10).content == PAGE  # the daemon goes on


@pytest.mark.parametrize("headers,kept", [
    ([(b"connection", b"close"), (b"x-a", b"1")], [(b"x-a", b"1")]),
    ([(b"connection", b"X-B , x-c"), (b"x-b", b"1"), (b"x-c", b"2"), (b"x-d", b"3")], [(b"x-d", b"3")]),
    ([(b"transfer-encoding", b"chunked"), (b"upgrade", b"h2c"), (b"te", b"trailers"), (b"x-e", b"4")],
     [(b"x-e", b"4")]),
    ([(b"x-request-id", b"abc"), (b"x-f", b"5")], [(b"x-f", b"5")]),
])
def test_end_to_end_headers(headers: list[tuple[bytes, bytes]], kept: list[tuple[bytes, bytes]]) -> None:
    assert end_to_end(headers, frozenset({b"x-request-id"})) == kept
