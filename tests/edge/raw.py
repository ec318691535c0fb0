"""A raw-socket HTTP/1.1 client for the attack suite: what an attacker sends, and how the server answered.

httpx would refuse to send most of these requests; here every byte is the test's. An
:class:`Answer` is read by its own framing (a length, chunks, or the close), so a test sees
exactly what came back, and whether the server then closed the connection.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

KEY = "edge-test-key"
AUTH = f"authorization: Bearer {KEY}\r\n".encode()
#: Longer than any answer here takes; reaching it means the server did not answer.
PATIENCE = 15.0


def chat_body(max_tokens: int = 2, stream: bool = False) -> bytes:
    """A small chat request body."""
    return json.dumps({"model": "ds-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
                       "stream": stream}).encode()


def chat_request(*, auth: bool = True, body: bytes | None = None, extra: bytes = b"") -> bytes:
    """A whole ``POST /v1/chat/completions``."""
    body = chat_body() if body is None else body
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-type: application/json\r\n"
            + (AUTH if auth else b"") + extra + b"content-length: %d\r\n\r\n" % len(body) + body)


@dataclass
class Answer:
    """One answer as the client read it."""

    status: int
    head: bytes
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


class Client:
    """One connection to the API port, from ``source`` (any 127.0.0.0/8 address on loopback)."""

    def __init__(self, url: str, source: str = "127.0.0.1", timeout: float = PATIENCE) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((source, 0))
        self.sock.settimeout(timeout)
        self.sock.connect((host, int(port)))
        self.buffer = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Send every byte."""
        self.sock.sendall(data)

    def _more(self) -> bytes:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return chunk

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            if not self._more():
                raise EOFError(f"closed before {marker!r}; read {self.buffer[:300]!r}")
        data, _, self.buffer = self.buffer.partition(marker)
        return data

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._more():
                raise EOFError(f"closed {size - len(self.buffer)} bytes short of a body")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def interim(self) -> bytes:
        """The next head, whatever it is (a 1xx, say): its status line and headers."""
        return self._until(b"\r\n\r\n")

    def answer(self, *, head_only: bool = False) -> Answer:
        """The next whole answer (interim 1xx answers are not skipped: they are answers here)."""
        head = self._until(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if head_only or status < 200 or status in (204, 304):
            return Answer(status, head, headers)
        if b"content-length" in headers:
            return Answer(status, head, headers, self._exactly(int(headers[b"content-length"])))
        if headers.get(b"transfer-encoding") == b"chunked":
            return Answer(status, head, headers, self._chunks())
        return Answer(status, head, headers, self.rest())

    def _chunks(self) -> bytes:
        body = b""
        while True:
            size = int(self._until(b"\r\n").split(b";")[0], 16)
            if size == 0:
                self._until(b"\r\n")
                return body
            body += self._exactly(size)
            if self._exactly(2) != b"\r\n":
                raise ValueError(f"a chunk of {size} bytes does not end in CRLF: the framing is broken")

    def rest_of_stream(self) -> bytes:
        """The rest of a chunked body already begun (its first chunk read), checked chunk by chunk."""
        return self._chunks()

    def rest(self) -> bytes:
        """Everything until the server closes."""
        while self._more():
            pass
        data, self.buffer = self.buffer, b""
        return data

    def closed(self) -> bool:
        """Whether the server closes the connection (EOF or reset) with nothing more to read."""
        try:
            return not self.buffer and not self._more()
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def push_until_refused(client: Client, data: bytes, limit: int) -> tuple[int, bool]:
    """Send ``data`` in a loop, never reading, until ``limit`` bytes went or the server stopped
    taking them; returns (bytes sent, whether the server closed or reset the connection)."""
    sent = 0
    client.sock.settimeout(3.0)  # a send that blocks this long: the server stopped reading
    while sent < limit:
        try:
            sent += client.sock.send(data)
        except TimeoutError:
            return sent, False
        except (BrokenPipeError, ConnectionResetError):
            return sent, True
    return sent, False


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB."""
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def wait_for(check: Any, timeout: float = PATIENCE) -> bool:
    """Poll ``check`` until it holds (True) or ``timeout`` passes (its last value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())
