"""The rest of the OpenAI and vLLM surface, passed through to the engines untouched.

``/v1/embeddings``, ``/v1/responses``, ``/tokenize``, ``/detokenize``, ``/v1/rerank``,
``/v1/score``, audio and whatever else the engines serve: the request goes to an engine as
the client sent it (method, path, query, headers but the hop-by-hop ones, body), and the
answer comes back as the engine sent it (status, headers, body, streamed as it arrives).
The same API key and body limit apply as everywhere on the port. The GPU's engines are
tried first, then the CPU's; an engine that does not know the route (404) passes it to the
next, and only a route no engine serves is a 404 from syshaxd. The request counts against
its engine in the conductor's books while it runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Protocol

from syshaxd.api.asgi import Request
from syshaxd.api.completions import request_id
from syshaxd.api.response import Response
from syshaxd.api.server import Handler
from syshaxd.engines import ConnectionPool, EngineClient, EngineFailure, Exchange, describe_error
from syshaxd.errors import ApiError

log = logging.getLogger("syshaxd.api")
access_log = logging.getLogger("syshaxd.access")

#: Headers that belong to one connection, not to the request or answer (RFC 9110 7.6.1),
#: and the framing headers this side writes itself.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                        b"proxy-authorization", b"te", b"trailer", b"transfer-encoding", b"upgrade", b"host",
                        b"content-length", b"expect"})


class Books(Protocol):
    """What pass-through asks of the books: the conductor, or a worker's remote conductor."""

    async def passthrough_engines(self) -> list[EngineClient]:
        """Engines to try, best first."""
        ...

    def hold(self, engine: EngineClient) -> object:
        """Count a pass-through request against ``engine``; a token for :meth:`unhold`."""
        ...

    def unhold(self, engine: EngineClient, token: object) -> None:
        """The pass-through request on ``engine`` is over."""
        ...


class _Relay:
    """One engine's answer to a passed-through request, written on to the client as it arrives."""

    def __init__(self, response: Response, rid: str, final: bool = False) -> None:
        self.response = response
        self.rid = rid
        self.final = final  # a 404 is the answer, not a hint to ask the next engine
        self.exchange: Exchange | None = None
        self.done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._held: list[bytes] | None = None  # a 404's body, read before deciding what it means
        self._headers: list[tuple[bytes, bytes]] = []

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._headers = [(k, v) for k, v in headers if k not in HOP_BY_HOP and k != b"x-request-id"]
        if status == 404 and not self.final:
            self._held = []  # "no such route" or "no such model"? The body says.
            return
        length = next((int(v) for k, v in headers if k == b"content-length" and v.isdigit()), None)
        self._start(status, length)

    def _start(self, status: int, length: int | None) -> None:
        self.response.start(status, [*self._headers, (b"x-request-id", self.rid.encode())], length)
        self.response.when_gone(self._gone)
        self.response.flow(self.exchange)

    def on_body(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        else:
            self.response.write(data)

    def on_end(self) -> None:
        if self._held is not None:
            body = b"".join(self._held)
            if not _openai_error(body):
                self._finish("next")  # the engine does not know the route: perhaps another does
                return
            self._start(404, len(body))
            self.response.write(body)
        self.response.flow(None)
        self.response.end()
        self._finish("ok")

    def _finish(self, outcome: str) -> None:
        if not self.done.done():
            self.done.set_result(outcome)

    def on_lost(self, exc: BaseException) -> None:
        if self.response.started:
            self.response.abort()  # the client must not take a cut body for a whole one
            self._finish("engine_error")
        elif not self.done.done():
            self.done.set_exception(ApiError(502, f"engine failed: {describe_error(exc)}", type="upstream_error"))

    def _gone(self) -> None:
        if self.exchange is not None:
            self.exchange.abort()
        if not self.done.done():
            self.done.set_result("client_disconnect")


def passthrough_route(conductor: Books, timeout: float) -> Handler:
    """The handler for every route that is neither the conductor's nor syshaxd's own."""

    async def handle(request: Request, response: Response) -> None:
        rid = request_id(request) or uuid.uuid4().hex
        target = request.raw_path + (b"?" + request.query if request.query else b"")
        headers = [(k, v) for k, v in request.headers if k not in HOP_BY_HOP and k != b"x-request-id"]
        engines = await conductor.passthrough_engines()
        started = time.monotonic()
        failure: ApiError | None = None
        for engine in engines:
            try:
                outcome = await _one(conductor, engine, request, response, rid, target, headers, timeout)
            except ApiError as exc:
                if response.started or exc.status != 502:
                    raise
                failure = exc  # unreachable or broken before answering: the next engine may serve it
                continue
            if outcome != "next":
                access_log.info("request id=%s kind=passthrough %s %s engine=%s outcome=%s e2e=%.3f",
                                rid, request.method, request.path, engine.name, outcome, time.monotonic() - started)
                return
        if failure is not None:
            raise failure
        raise ApiError(404, f"{request.method} {request.path}: no engine serves this route "
                            f"({', '.join(e.name for e in engines)} answered 404)", type="not_found_error")

    return handle


async def _one(conductor: Books, engine: EngineClient, request: Request, response: Response, rid: str,
               target: bytes, headers: list[tuple[bytes, bytes]], timeout: float) -> str:
    token = conductor.hold(engine)
    relay = _Relay(response, rid)
    try:
        wire = engine.raw_request(request.method.encode(), target, headers, request.body, rid)
        try:
            relay.exchange = await engine.exchange(wire, relay)
        except EngineFailure as exc:
            raise ApiError(502, f"engine {engine.name} failed: {exc.message}", type="upstream_error") from None
        try:
            return await asyncio.wait_for(asyncio.shield(relay.done), timeout)
        except asyncio.TimeoutError:
            relay.exchange.abort()
            if response.started:
                response.abort()
                return "timeout"
            raise ApiError(504, f"request exceeded system.request_timeout ({timeout:g} s)", type="timeout") from None
        except asyncio.CancelledError:
            relay.exchange.abort()
            raise
    finally:
        conductor.unhold(engine, token)


def forward_route(daemon: ConnectionPool, timeout: float) -> Handler:
    """A worker's handler for the daemon's own routes (health, metrics, models, docs): the
    request goes to the daemon's API as the client sent it, the answer comes back as is."""

    async def handle(request: Request, response: Response) -> None:
        rid = request_id(request) or uuid.uuid4().hex
        target = request.raw_path + (b"?" + request.query if request.query else b"")
        extra = b"".join(b"%s: %s\r\n" % (k, v) for k, v in request.headers
                         if k not in HOP_BY_HOP and k != b"x-request-id")
        wire = (b"%s %s HTTP/1.1\r\nhost: syshaxd\r\ncontent-length: %d\r\nx-request-id: %s\r\n%s\r\n"
                % (request.method.encode(), target, len(request.body), rid.encode("latin-1"), extra) + request.body)
        relay = _Relay(response, rid, final=True)
        try:
            conn = await daemon.acquire()
        except OSError as exc:
            raise ApiError(503, f"syshaxd's daemon process cannot be reached: {describe_error(exc)}",
                           type="service_unavailable") from None
        relay.exchange = Exchange(daemon, wire, relay)
        relay.exchange.start(conn)
        try:
            await asyncio.wait_for(asyncio.shield(relay.done), timeout)
        except asyncio.TimeoutError:
            relay.exchange.abort()
            raise ApiError(504, f"the daemon did not answer within {timeout:g} s", type="timeout") from None

    return handle


def _openai_error(body: bytes) -> bool:
    """Whether a 404's body is an API error (no such model) rather than "no such route"."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and (isinstance(data.get("error"), dict) or data.get("object") == "error")
