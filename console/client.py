"""The control API client: HTTP over the daemon's Unix socket, parsed into the wire schema.

httpx only (no Textual): the app and ``--once`` share it, and tests drive it with
``httpx.MockTransport``. Every failure becomes a :class:`ControlError` carrying a message
written for the operator (the daemon's own reason when it gave one).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
from pydantic import BaseModel, RootModel, ValidationError

from syshaxd.schema import (
    AdviceModel,
    ConfigChangeModel,
    DecisionModel,
    ErrorModel,
    PatchBody,
    RequestRecordModel,
    StateModel,
)
from syshaxd.sse import aiter_events

#: What ``events()`` yields: one parsed event of the ``/v1/events`` stream.
Event = StateModel | DecisionModel | ConfigChangeModel

_EVENT_MODELS: dict[str, type[BaseModel]] = {
    "state": StateModel,
    "decision": DecisionModel,
    "config": ConfigChangeModel,
}

# The daemon sends a state event several times a second: a stream silent this long is dead.
STREAM_SILENCE = 10.0


class ControlError(Exception):
    """The control API could not do what was asked; ``str()`` is the operator's message."""

    def __init__(self, message: str, *, status: int | None = None, key: str | None = None) -> None:
        self.message = message
        self.status = status
        self.key = key
        super().__init__(message)


class Unreachable(ControlError):
    """No daemon answers on the socket (missing, refused, timed out, or the stream broke)."""


class Forbidden(ControlError):
    """The daemon refuses writes from this user (403): the console goes read-only."""


class Rejected(ControlError):
    """The daemon refused the change (422 and friends); nothing was changed."""


class ProtocolError(ControlError):
    """The daemon answered something that is not the control API's schema."""


class ControlClient:
    """A client of one daemon's control socket."""

    def __init__(
        self,
        socket_path: Path,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 5.0,
    ) -> None:
        """Prepare a client; no connection is made until the first call.

        Args:
            socket_path: the control socket (only shown in messages when ``transport`` is given).
            transport: an httpx transport to use instead of the Unix socket (tests).
            timeout: seconds a request may take.
        """
        self.socket_path = socket_path
        self._transport = transport or httpx.AsyncHTTPTransport(uds=str(socket_path))
        self._http = httpx.AsyncClient(
            transport=self._transport,
            base_url="http://syshaxd",
            timeout=httpx.Timeout(timeout),
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def state(self) -> StateModel:
        """GET /v1/state."""
        response = await self._request("GET", "/v1/state")
        return _parse(StateModel, response.content, "/v1/state")

    async def patch(self, body: PatchBody) -> ConfigChangeModel:
        """PATCH /v1/config with flat dotted keys; the answer says what changed."""
        response = await self._request("PATCH", "/v1/config", json=body)
        return _parse(ConfigChangeModel, response.content, "/v1/config")

    async def save(self) -> ConfigChangeModel:
        """POST /v1/config/save: persist the running runtime values."""
        response = await self._request("POST", "/v1/config/save")
        return _parse_change(response)

    async def reload(self) -> ConfigChangeModel:
        """POST /v1/reload: reread the config files, as SIGHUP does."""
        response = await self._request("POST", "/v1/reload")
        return _parse_change(response)

    async def requests(self, limit: int | None = None) -> list[RequestRecordModel]:
        """GET /v1/requests: the last finished requests, oldest first."""
        params = "" if limit is None else f"?limit={limit}"
        response = await self._request("GET", f"/v1/requests{params}")
        return _parse(_RecordList, response.content, "/v1/requests").root

    async def advice(self) -> AdviceModel | None:
        """GET /v1/advice: the latest advice of ``syshax advise``; None before any."""
        try:
            response = await self._request("GET", "/v1/advice")
        except Rejected as exc:
            if exc.status == 404:
                return None
            raise
        return _parse(AdviceModel, response.content, "/v1/advice")

    async def events(self) -> AsyncIterator[Event]:
        """Follow GET /v1/events; ends when the daemon closes the stream.

        Unknown event names are skipped (a newer daemon may add some).
        """
        timeout = httpx.Timeout(5.0, read=STREAM_SILENCE)
        try:
            async with self._http.stream("GET", "/v1/events", timeout=timeout) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise _error_for(response)
                async for sse in aiter_events(response.aiter_bytes()):
                    model = _EVENT_MODELS.get(sse.event)
                    if model is not None:
                        yield cast(Event, _parse(model, sse.data, f"{sse.event} event"))
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    async def _request(self, method: str, path: str, json: Any = None) -> httpx.Response:
        try:
            response = await self._http.request(method, path, json=json)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise _error_for(response)
        return response

    def _unreachable(self, exc: httpx.HTTPError) -> Unreachable:
        return Unreachable(f"no daemon on {self.socket_path}: {_why(exc)}")


def _why(exc: httpx.HTTPError) -> str:
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        nxt = cause.__cause__ or cause.__context__
        assert nxt is not None
        cause = nxt
    if isinstance(cause, FileNotFoundError):
        return "the socket does not exist (is syshaxd running?)"
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused (is syshaxd running?)"
    if isinstance(cause, PermissionError):
        return "permission denied (are you in the socket's group?)"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the connection closed"
    text = str(cause) or str(exc) or type(exc).__name__
    return text


def _error_for(response: httpx.Response) -> ControlError:
    message, key = _error_text(response)
    status = response.status_code
    if status == 403:
        return Forbidden(message, status=status, key=key)
    if 400 <= status < 500:
        return Rejected(message, status=status, key=key)
    return ControlError(f"daemon error {status}: {message}", status=status, key=key)


def _error_text(response: httpx.Response) -> tuple[str, str | None]:
    try:
        error = ErrorModel.model_validate_json(response.content)
    except ValidationError:
        text = response.text.strip()
        return (text[:200] or response.reason_phrase or f"HTTP {response.status_code}"), None
    return error.error, error.key


def _parse_change(response: httpx.Response) -> ConfigChangeModel:
    # save and reload may answer with an empty body on an older daemon.
    if not response.content.strip():
        return ConfigChangeModel()
    return _parse(ConfigChangeModel, response.content, str(response.request.url.path))


M = TypeVar("M", bound=BaseModel)


class _RecordList(RootModel[list[RequestRecordModel]]):
    """The body of GET /v1/requests."""


def _parse(model: type[M], raw: bytes | str, what: str) -> M:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ProtocolError(f"unexpected {what} from the daemon: {where}: {first['msg']}") from None
    except (ValueError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"unexpected {what} from the daemon: {exc}") from None
