"""Hop-by-hop headers stay on their hop: neither the client's reach the engine, nor the engine's the client.

A recording engine (the standard library's HTTP server) stands in for both engines, so the
test sees every header syshaxd forwarded on a passed-through route, and answers with
hop-by-hop headers of its own, some of them named only in its ``Connection`` header.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.edge.raw import AUTH, KEY, Client
from tests.plugins.fake_vllm import FakeVllm
from tests.plugins.stack import Stack


class Recorder:
    """An engine that serves what the monitor asks and records the headers of ``GET /echo``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                extra: list[tuple[str, str]] = []
                if self.path == "/metrics":
                    body = FakeVllm.METRICS.encode()
                elif self.path == "/v1/models":
                    body = json.dumps({"object": "list", "data": [{"id": FakeVllm.MODEL, "object": "model"}]}).encode()
                elif self.path == "/echo":
                    recorder.seen.append({k.lower(): v for k, v in self.headers.items()})
                    body = b'{"ok": true}'
                    extra = [("Connection", "keep-alive, x-engine-hop"), ("X-Engine-Hop", "1"),
                             ("Keep-Alive", "timeout=5"), ("X-Kept", "1")]
                else:
                    body = b""
                self.send_response(200)
                for name, value in extra:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def recorded(make_module_stack: Callable[..., Stack]) -> Iterator[tuple[Stack, Recorder]]:
    """A daemon in front of two recording engines."""
    engines = [Recorder(), Recorder()]
    try:
        yield make_module_stack(api_key=KEY, engine_ports=(engines[0].port, engines[1].port)), engines[0]
    finally:
        for engine in engines:
            engine.close()


def echo(stack: Stack, extra: bytes) -> tuple[dict[bytes, bytes], bytes]:
    with Client(stack.url) as client:
        client.send(b"GET /echo HTTP/1.1\r\nhost: edge\r\n" + AUTH + extra + b"\r\n")
        answer = client.answer()
        assert answer.status == 200, answer.body
        return answer.headers, answer.body


def test_an_end_to_end_header_passes_both_ways(recorded: tuple[Stack, Recorder]) -> None:
    stack, engine = recorded
    headers, _ = echo(stack, b"x-client-kept: 1\r\n")
    assert engine.seen[-1]["x-client-kept"] == "1"
    assert headers[b"x-kept"] == b"1"


def test_the_clients_hop_by_hop_headers_do_not_reach_the_engine(recorded: tuple[Stack, Recorder]) -> None:
    stack, engine = recorded
    echo(stack, b"connection: keep-alive, x-client-hop\r\nx-client-hop: secret\r\nkeep-alive: timeout=9\r\n"
                b"te: trailers\r\nproxy-connection: keep-alive\r\n")
    seen = engine.seen[-1]
    assert not {"x-client-hop", "keep-alive", "te", "proxy-connection"} & set(seen), seen
    assert seen.get("connection", "keep-alive").lower() in ("keep-alive", "close")


def test_the_engines_hop_by_hop_headers_do_not_reach_the_client(recorded: tuple[Stack, Recorder]) -> None:
    stack, _ = recorded
    headers, _ = echo(stack, b"")
    assert b"x-engine-hop" not in headers and b"keep-alive" not in headers, headers
