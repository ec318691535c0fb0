"""Talking to one engine: a pooled HTTP client, and failures classified for resubmission."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from syshaxd.config import EngineSpec
from syshaxd.engines.pool import EngineTransport
from syshaxd.errors import engine_error_message


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


@dataclass(eq=False)  # identity: flights keep the engines they hold in sets
class Upstream:
    """One engine with its own pooled client and the conductor's accounting for it."""

    spec: EngineSpec
    client: httpx.AsyncClient
    inflight: int = 0  # routed here, not finished
    scheduled: int = 0  # routed here, no first byte yet
    decode_tokens: int = 0  # output tokens the in-flight requests may still write (their max_tokens)
    prompt_tokens: int = 0  # prompt tokens of the scheduled requests (their prefill is still to come)
    answered_at: float | None = None  # time.monotonic() when the engine last sent answer bytes

    @classmethod
    def create(cls, spec: EngineSpec) -> Upstream:
        """A client per engine, reused by every request (never a client per request)."""
        client = httpx.AsyncClient(
            base_url=spec.url,
            # Reads may legitimately wait minutes (a long CPU decode); the conductor's own
            # request deadline bounds them instead.
            timeout=httpx.Timeout(connect=5.0, read=None, write=30.0, pool=None),
            transport=EngineTransport(max_idle=512, keepalive_expiry=5.0),
            headers={"User-Agent": "syshaxd"},
        )
        return cls(spec=spec, client=client)

    @property
    def name(self) -> str:
        """The engine's name."""
        return self.spec.name

    async def open_stream(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """Send a request and return the response with its body not yet read.

        Raises:
            EngineFailure: the engine is unreachable or answered 5xx.
            EngineRejected: the engine answered 4xx.
        """
        request = self.client.build_request(
            "POST", path, content=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            response = await self.client.send(request, stream=True)
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

    async def aclose(self) -> None:
        """Close the pooled client."""
        await self.client.aclose()


def describe_http_error(exc: httpx.HTTPError) -> str:
    """A one-line description of a transport error."""
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection closed by the engine"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")
