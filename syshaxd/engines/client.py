"""Talking to one engine: requests over its connection pool, failures classified for resubmission.

Two ways to read an answer. The relay gives a :class:`~syshaxd.engines.connection.Sink` to
:meth:`EngineClient.exchange` and is called back as bytes arrive (the hot path: no task per
response). Everything else -- splits, assembled answers, small JSON calls -- awaits an
:class:`EngineResponse`. The engine's own side APIs that are not on any request's path
(llama-server's ``/slots``, ``/v1/models``) go through ``http``, an httpx client. What the
conductor counts against an engine is not kept here but in its books
(:mod:`syshaxd.conductor.books`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from syshaxd.config import EngineSpec
from syshaxd.engines.connection import ConnectionPool, EngineConnection, Sink
from syshaxd.engines.exchange import EngineResponse, Exchange
from syshaxd.engines.failures import EngineFailure, EngineRejected, describe_error, json_answer
from syshaxd.errors import engine_error_message
from syshaxd.snapshot import Device


class EngineClient:
    """One engine: its connection pool, and its side APIs over httpx."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        url = urlsplit(spec.url)
        if url.scheme != "http":
            raise ValueError(f"engines are reached over plain http://, not {url.scheme}:// ({spec.url})")
        self._prefix = url.path.rstrip("/").encode()
        self._host = (url.netloc or "engine").encode()
        self.pool = ConnectionPool(url.hostname or "127.0.0.1", url.port or 80)
        self.http = httpx.AsyncClient(base_url=spec.url, timeout=httpx.Timeout(10.0), headers={"User-Agent": "syshaxd"})
        """An httpx client, for the engine's own APIs that no request waits on (llama-server's /slots)."""

    def __repr__(self) -> str:
        return f"EngineClient({self.spec.name!r}, {self.spec.url!r})"

    @property
    def name(self) -> str:
        """The engine's name."""
        return self.spec.name

    @property
    def device(self) -> Device:
        """The device the engine runs on."""
        return self.spec.device

    def request_bytes(self, method: bytes, path: str, body: bytes, headers: Mapping[str, str] | None = None,
                      content_type: bytes = b"application/json") -> bytes:
        """One HTTP/1.1 request as written on the wire."""
        extra = b"".join(b"%s: %s\r\n" % (k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items())
        return (b"%s %s%s HTTP/1.1\r\nhost: %s\r\nuser-agent: syshaxd\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
                b"%s\r\n" % (method, self._prefix, path.encode("latin-1"), self._host, content_type, len(body), extra)
                + body)

    def raw_request(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                    request_id: str) -> bytes:
        """A client's request as it goes on to the engine: its own headers (the caller dropped the
        hop-by-hop ones), this connection's framing, and the request id."""
        extra = b"".join(b"%s: %s\r\n" % (k, v) for k, v in headers)
        return (b"%s %s%s HTTP/1.1\r\nhost: %s\r\ncontent-length: %d\r\nx-request-id: %s\r\n%s\r\n"
                % (method, self._prefix, target, self._host, len(body), request_id.encode("latin-1"), extra) + body)

    def exchange_on(self, conn: EngineConnection, request: bytes, sink: Sink) -> Exchange:
        """:meth:`exchange` on a connection already taken from the pool (``pool.take_idle()``)."""
        exchange = Exchange(self.pool, request, sink)
        exchange.start(conn)
        return exchange

    async def exchange(self, request: bytes, sink: Sink, no_body: bool = False) -> Exchange:
        """Send a whole request; the answer goes to ``sink``, called back as bytes arrive
        (``no_body``: the request is HEAD, its answer ends with the headers).

        Raises:
            EngineFailure: the engine cannot be reached.
        """
        try:
            conn = await self.pool.acquire()
        except OSError as exc:
            raise EngineFailure(self.name, describe_error(exc)) from None
        exchange = Exchange(self.pool, request, sink, no_body)
        exchange.start(conn)
        return exchange

    async def open_stream(self, path: str, body: bytes, headers: Mapping[str, str] | None = None) -> EngineResponse:
        """POST and return the response once its status is in, its body not yet read.

        Raises:
            EngineFailure: the engine is unreachable or answered 5xx.
            EngineRejected: the engine answered 4xx.
        """
        response = EngineResponse(self.name)
        response.exchange = await self.exchange(self.request_bytes(b"POST", path, body, headers), response)
        try:
            status = await response.head()
        except BaseException:
            response.close()
            raise
        if status != 200:
            try:
                data = await response.aread()
            except EngineFailure:
                data = b""
            if 400 <= status < 500 and status not in (408, 429):
                raise EngineRejected(self.name, status, data)
            raise EngineFailure(self.name, engine_error_message(status, data), status=status)
        return response

    async def post_json(self, path: str, body: bytes, headers: Mapping[str, str] | None = None
                        ) -> tuple[dict[str, Any], bytes]:
        """POST and parse a JSON object answer; garbage is an EngineFailure."""
        response = await self.open_stream(path, body, headers)
        try:
            data = await response.aread()
        finally:
            response.close()
        parsed = json_answer(self.name, data)
        return parsed, data

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` over the pool: the status and the whole body.

        Raises:
            EngineFailure: the engine cannot be reached or broke off the answer.
        """
        response = EngineResponse(self.name)
        response.exchange = await self.exchange(self.request_bytes(b"GET", path, b""), response)
        try:
            status = await response.head()
            return status, await response.aread()
        finally:
            response.close()

    async def get_json(self, path: str, timeout: float) -> Any:
        """GET ``path`` and parse its JSON answer; None when the engine did not answer 200 with JSON."""
        try:
            response = await self.http.get(path, timeout=timeout)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    async def aclose(self) -> None:
        """Close every connection (ends any answer still streaming) and the side client."""
        self.pool.close()
        await self.http.aclose()


