"""Talking to one engine: a pooled HTTP client, its event streams, and failures classified
for resubmission. What the conductor counts against an engine is not kept here but in the
conductor's books (:mod:`syshaxd.conductor.books`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from syshaxd.config import EngineSpec
from syshaxd.engines.pool import EngineTransport
from syshaxd.errors import engine_error_message
from syshaxd.snapshot import Device
from syshaxd.sse import Decoder, NotEventStream


class EngineFailure(Exception):
    """An engine did not answer usefully (connection, 5xx, garbage): worth trying elsewhere."""

    def __init__(self, engine: str, message: str, status: int = 502) -> None:
        super().__init__(f"{engine}: {message}")
        self.engine = engine
        self.message = message
        self.status = status


class EngineRejected(Exception):
    """An engine refused the request itself (4xx): the client's problem, not the engine's."""

    def __init__(self, engine: str, status: int, body: bytes) -> None:
        super().__init__(f"{engine}: HTTP {status}")
        self.engine = engine
        self.status = status
        self.body = body


class EngineClient:
    """One engine with its own pooled HTTP client, reused by every request (never one per request)."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.http = httpx.AsyncClient(
            base_url=spec.url,
            # Reads may legitimately wait minutes (a long CPU decode); the conductor's own
            # request deadline bounds them instead.
            timeout=httpx.Timeout(connect=5.0, read=None, write=30.0, pool=None),
            transport=EngineTransport(max_idle=512, keepalive_expiry=5.0),
            headers={"User-Agent": "syshaxd"},
        )
        """The pooled client, for protocols that speak an engine's own API (llama-server's /slots)."""

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

    async def open_stream(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Send a request and return the response with its body not yet read.

        Raises:
            EngineFailure: the engine is unreachable or answered 5xx.
            EngineRejected: the engine answered 4xx.
        """
        request = self.http.build_request(
            "POST", path, content=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            response = await self.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise EngineFailure(self.name, describe_http_error(exc)) from None
        if response.status_code != 200:
            try:
                data = await response.aread()
            except httpx.HTTPError:
                data = b""
            finally:
                await response.aclose()
            if 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                raise EngineRejected(self.name, response.status_code, data)
            raise EngineFailure(
                self.name, engine_error_message(response.status_code, data), status=response.status_code
            )
        return response

    async def post_json(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], bytes]:
        """POST and parse a JSON object answer; garbage is an EngineFailure."""
        response = await self.open_stream(path, body, headers)
        try:
            data = await response.aread()
        except httpx.HTTPError as exc:
            raise EngineFailure(self.name, describe_http_error(exc)) from None
        finally:
            await response.aclose()
        try:
            parsed = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise EngineFailure(self.name, "engine answered 200 with a body that is not JSON") from None
        if not isinstance(parsed, dict):
            raise EngineFailure(self.name, "engine answered 200 with JSON that is not an object")
        if "error" in parsed and "choices" not in parsed:
            raise EngineFailure(self.name, engine_error_message(200, data))
        return parsed, data

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
        """Close the pooled client (ends any stream still open)."""
        await self.http.aclose()


def describe_http_error(exc: httpx.HTTPError) -> str:
    """A one-line description of a transport error."""
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection closed by the engine"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


async def engine_events(response: httpx.Response, engine: str) -> AsyncIterator[dict[str, Any]]:
    """Yield each JSON event of an engine's stream until ``[DONE]``.

    Raises:
        EngineFailure: the stream broke, carried an error event, held garbage, or ended
            without ``[DONE]`` (a truncated answer is never taken for success).
    """
    decoder = Decoder(strict=True)
    try:
        async for chunk in response.aiter_raw():
            try:
                events = decoder.feed(chunk)
            except NotEventStream:
                raise EngineFailure(engine, "engine stream is not Server-Sent Events") from None
            for event in events:
                if event.done:
                    return
                try:
                    data = event.json()
                except ValueError:
                    raise EngineFailure(engine, "engine stream holds an event that is not JSON") from None
                if not isinstance(data, dict):
                    raise EngineFailure(engine, "engine stream holds an event that is not an object")
                if "error" in data:
                    raise EngineFailure(engine, engine_error_message(200, event.data))
                yield data
    except httpx.HTTPError as exc:
        raise EngineFailure(engine, describe_http_error(exc)) from None
    raise EngineFailure(engine, "engine stream ended without [DONE]")
