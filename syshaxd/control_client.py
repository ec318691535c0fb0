"""The control socket's client: ``syshax`` and the console talk to the running daemon through it.

HTTP over the daemon's Unix socket with httpx; answers parsed into the wire schema
(:mod:`syshaxd.schema`); every failure a :class:`ControlError` whose message is written for
the operator -- the daemon's own reason when it gave one, else what went wrong on the way and
what to do about it. One set of rules (the API's calls, how an answer is read, how a failure
is explained) with two faces: :class:`ControlClient` awaits (the console, which follows the
event stream) and :class:`BlockingControlClient` blocks (the ``syshax`` command and ``syshax
advise``: a request or two, then out). Both take an httpx transport instead of the socket
for tests. Nothing here imports the daemon's config or server stack: the console may use it.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

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
_EVENT_MODELS: dict[str, type[BaseModel]] = {"state": StateModel, "decision": DecisionModel,
                                             "config": ConfigChangeModel}
#: The daemon sends a state event several times a second: a stream silent this long is dead.
STREAM_SILENCE = 10.0
M = TypeVar("M", bound=BaseModel)


class ControlError(Exception):
    """The control API could not do what was asked; the message is the operator's."""

    def __init__(self, message: str, *, status: int | None = None, key: str | None = None) -> None:
        self.message = message
        self.status = status
        self.key = key
        super().__init__(message)


class Unreachable(ControlError):
    """No daemon answers on the socket (missing, refused, timed out, or the stream broke)."""


class Forbidden(ControlError):
    """The daemon refuses this user the call (403): the console goes read-only."""


class Rejected(ControlError):
    """The daemon refused the call itself (422 and the other 4xx); nothing was changed."""


class ProtocolError(ControlError):
    """The daemon answered something that is not the control API's schema."""


class _RecordList(RootModel[list[RequestRecordModel]]):
    """The body of GET /v1/requests."""


@dataclass(frozen=True)
class Call(Generic[M]):
    """One call of the control API: what is sent, and what its answer is parsed into."""

    method: str
    path: str
    model: type[M]
    body: Any = None
    empty_ok: bool = False  # an empty answer is the model's defaults (an older daemon's save and reload)


STATE = Call("GET", "/v1/state", StateModel)
SAVE = Call("POST", "/v1/config/save", ConfigChangeModel, empty_ok=True)
RELOAD = Call("POST", "/v1/reload", ConfigChangeModel, empty_ok=True)
ADVICE = Call("GET", "/v1/advice", AdviceModel)


def patch_call(body: PatchBody) -> Call[ConfigChangeModel]:
    """PATCH /v1/config with flat dotted keys."""
    return Call("PATCH", "/v1/config", ConfigChangeModel, body)


def requests_call(limit: int | None = None) -> Call[_RecordList]:
    """GET /v1/requests (the last ``limit`` finished requests, oldest first)."""
    return Call("GET", "/v1/requests" + ("" if limit is None else f"?limit={limit}"), _RecordList)


class _Rules:
    """What both faces share: the socket, and how answers and failures are read."""

    def __init__(self, socket_path: Path, looked: list[Path] | None, timeout: float) -> None:
        self.socket_path = socket_path
        self.looked = looked or [socket_path]
        self.timeout = timeout

    def unreachable(self, exc: BaseException) -> Unreachable:
        """Why the daemon could not be talked to, in the operator's terms."""
        path, cause = self.socket_path, _root(exc)
        if isinstance(cause, FileNotFoundError) or not path.exists():
            where = ", ".join(str(p) for p in self.looked)
            return Unreachable(f"syshaxd is not running: the socket {where} does not exist "
                               "(start syshaxd, or give --socket PATH)")
        if isinstance(cause, ConnectionRefusedError):
            return Unreachable(f"syshaxd is not running: connection refused on {path} "
                               "(a stale socket from a daemon that died?)")
        if isinstance(cause, PermissionError):
            return Unreachable(f"permission denied on {path}: reading needs membership in the daemon's "
                               f"control group (control.group); you are uid {os.geteuid()}")
        if isinstance(exc, httpx.TimeoutException) or isinstance(cause, TimeoutError):
            return Unreachable(f"syshaxd at {path} did not answer within {self.timeout:g} s")
        if isinstance(exc, httpx.RemoteProtocolError):
            return Unreachable(f"syshaxd at {path} closed the connection")
        return Unreachable(f"cannot talk to syshaxd at {path}: {str(cause) or str(exc) or type(exc).__name__}")

    def answer(self, call: Call[M], response: httpx.Response) -> M:
        """The call's answer parsed, or the daemon's refusal raised."""
        if response.status_code >= 400:
            raise refusal(response)
        if call.empty_ok and not response.content.strip():
            return call.model()
        return parse(call.model, response.content, f"answer to {call.method} {call.path}")

    def raw(self, response: httpx.Response) -> Any:
        """A JSON answer as it came (for callers that parse it themselves), or the refusal raised."""
        if response.status_code >= 400:
            raise refusal(response)
        try:
            return response.json()
        except ValueError:
            raise ProtocolError(f"the daemon's answer to {response.request.url.path} is not JSON") from None

    def preflight(self) -> None:
        """Reach the socket with a socket of our own first: httpcore leaks its socket (a
        ResourceWarning) when its connect fails, and this says why in the operator's terms."""
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(self.timeout)
            probe.connect(str(self.socket_path))
        except OSError as exc:
            raise self.unreachable(exc) from None
        finally:
            probe.close()


class ControlClient(_Rules):
    """A client of one daemon's control socket, awaited (the console)."""

    def __init__(self, socket_path: Path, *, transport: httpx.AsyncBaseTransport | None = None,
                 timeout: float = 5.0, looked: list[Path] | None = None) -> None:
        """Prepare a client; no connection is made until the first call.

        Args:
            socket_path: the control socket (only named in messages when ``transport`` is given).
            transport: an httpx transport to use instead of the Unix socket (tests).
            timeout: seconds a call may take.
            looked: every place the socket was looked for (named when none was there).
        """
        super().__init__(socket_path, looked, timeout)
        self._http = httpx.AsyncClient(transport=transport or httpx.AsyncHTTPTransport(uds=str(socket_path)),
                                       base_url="http://syshaxd", timeout=httpx.Timeout(timeout))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def call(self, call: Call[M]) -> M:
        """One call, its answer parsed."""
        return self.answer(call, await self._send(call.method, call.path, call.body))

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call whose JSON answer the caller reads itself."""
        return self.raw(await self._send(method, path, body))

    async def state(self) -> StateModel:
        """GET /v1/state."""
        return await self.call(STATE)

    async def patch(self, body: PatchBody) -> ConfigChangeModel:
        """PATCH /v1/config with flat dotted keys; the answer says what changed."""
        return await self.call(patch_call(body))

    async def save(self) -> ConfigChangeModel:
        """POST /v1/config/save: persist the running runtime values."""
        return await self.call(SAVE)

    async def reload(self) -> ConfigChangeModel:
        """POST /v1/reload: reread the config files, as SIGHUP does."""
        return await self.call(RELOAD)

    async def requests(self, limit: int | None = None) -> list[RequestRecordModel]:
        """GET /v1/requests: the last finished requests, oldest first."""
        return (await self.call(requests_call(limit))).root

    async def advice(self) -> AdviceModel | None:
        """GET /v1/advice: the latest advice of ``syshax advise``; None before any."""
        try:
            return await self.call(ADVICE)
        except Rejected as exc:
            if exc.status == 404:
                return None
            raise

    async def events(self) -> AsyncIterator[Event]:
        """Follow GET /v1/events; ends when the daemon closes the stream.

        Unknown event names are skipped (a newer daemon may add some).
        """
        timeout = httpx.Timeout(self.timeout, read=STREAM_SILENCE)
        try:
            async with self._http.stream("GET", "/v1/events", timeout=timeout) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise refusal(response)
                async for sse in aiter_events(response.aiter_bytes()):
                    model = _EVENT_MODELS.get(sse.event)
                    if model is not None:
                        yield cast(Event, parse(model, sse.data, f"{sse.event} event"))
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None

    async def _send(self, method: str, path: str, body: Any) -> httpx.Response:
        try:
            return await self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None


class BlockingControlClient(_Rules):
    """A client of one daemon's control socket that blocks (``syshax``, ``syshax advise``)."""

    def __init__(self, socket_path: Path, *, transport: httpx.BaseTransport | None = None,
                 timeout: float = 10.0, looked: list[Path] | None = None) -> None:
        """As :class:`ControlClient`."""
        super().__init__(socket_path, looked, timeout)
        self._checked = transport is not None  # a test's transport has no socket to reach first
        self._http = httpx.Client(transport=transport or httpx.HTTPTransport(uds=str(socket_path)),
                                  base_url="http://syshaxd", timeout=httpx.Timeout(timeout))

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def call(self, call: Call[M]) -> M:
        """One call, its answer parsed."""
        return self.answer(call, self._send(call.method, call.path, call.body))

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call whose JSON answer the caller reads itself."""
        return self.raw(self._send(method, path, body))

    def _send(self, method: str, path: str, body: Any) -> httpx.Response:
        if not self._checked:
            self.preflight()
            self._checked = True
        try:
            return self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None


def refusal(response: httpx.Response) -> ControlError:
    """The error a refusal (4xx/5xx) is, with the daemon's reason and the key it names."""
    try:
        error = ErrorModel.model_validate_json(response.content)
        message, key = error.error, error.key
    except ValidationError:
        message, key = response.text.strip()[:200] or response.reason_phrase or f"HTTP {response.status_code}", None
    if key and key != "(body)" and not message.startswith(key):
        message = f"{key}: {message}"
    status = response.status_code
    if status == 403:
        return Forbidden(message, status=status, key=key)
    if 400 <= status < 500:
        return Rejected(message, status=status, key=key)
    return ControlError(f"the daemon answered {status}: {message}", status=status, key=key)


def parse(model: type[M], raw: bytes | str, what: str) -> M:
    """``raw`` JSON as ``model``; anything else is a ProtocolError naming the first wrong field."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ProtocolError(f"unexpected {what} from the daemon: {where}: {first['msg']}") from None
    except (ValueError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"unexpected {what} from the daemon: {exc}") from None


def _root(exc: BaseException) -> BaseException:
    """The innermost cause of an httpx error (the OSError under httpcore's wrappers)."""
    cause: BaseException = exc
    seen = 0
    while (cause.__cause__ or cause.__context__) is not None and seen < 20:
        cause = cast(BaseException, cause.__cause__ or cause.__context__)
        seen += 1
    return cause
