"""A vLLM-speaking fake engine that records what it receives, and the ``fake_engines`` fixture.

Where a test must see exactly what syshaxd sent an engine (headers, bodies), the simulator
is too much: this one answers from a thread with the standard library.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class FakeVllm:
    """A vLLM-speaking engine on a loopback port that records every POST body it receives.

    It serves one model, ``ds-32b``: chat requests for any other model get vLLM's 404.
    """

    MODEL = "ds-32b"
    METRICS = "".join(
        f"# TYPE vllm:{name} gauge\nvllm:{name}{{engine=\"0\",model_name=\"ds-32b\"}} 0.0\n"
        for name in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
    )

    def __init__(self) -> None:
        """Bind a free port (the kernel's pick: no race) and serve in a thread."""
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.request_ids: list[str | None] = []  # the X-Request-Id header of each POST
        self.traceparents: list[str | None] = []  # the traceparent header of each POST
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest's output clean

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(200, b"")
                elif self.path == "/metrics":
                    self._send(200, fake.METRICS.encode(), "text/plain; version=0.0.4")
                elif self.path == "/v1/models":
                    models = {"object": "list", "data": [{"id": fake.MODEL, "object": "model"}]}
                    self._send(200, json.dumps(models).encode())
                else:
                    self._send(404, b'{"detail": "Not Found"}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.received.append((self.path, body))
                    fake.request_ids.append(self.headers.get("X-Request-Id"))
                    fake.traceparents.append(self.headers.get("traceparent"))
                self._send(*fake.answer(self.path, body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """vLLM's answer: a short chat completion, or its 404 for a model it does not serve."""
        if path != "/v1/chat/completions":
            return 404, b'{"detail": "Not Found"}'
        if body.get("model") != self.MODEL:
            error = {"message": f"The model `{body.get('model')}` does not exist.", "type": "NotFoundError",
                     "param": "model", "code": 404}
            return 404, json.dumps({"error": error}).encode()
        answer = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": self.MODEL,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"},
                               "logprobs": None, "finish_reason": "length", "stop_reason": None}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
        return 200, json.dumps(answer).encode()

    def bodies(self, path: str = "/v1/chat/completions") -> list[dict[str, Any]]:
        """The bodies POSTed to ``path`` so far, in order."""
        with self._lock:
            return [body for p, body in self.received if p == path]

    def close(self) -> None:
        """Stop serving and free the port."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def fake_engines() -> Iterator[tuple[FakeVllm, FakeVllm]]:
    """Two recording fake engines (GPU, CPU), closed at teardown."""
    made: list[FakeVllm] = []
    try:
        made.append(FakeVllm())
        made.append(FakeVllm())
        yield made[0], made[1]
    finally:
        for fake in made:
            fake.close()
