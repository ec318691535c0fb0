"""The rest of the OpenAI and vLLM surface, passed through to the engines untouched.

``/v1/embeddings``, ``/v1/responses``, ``/tokenize``, ``/detokenize``, ``/v1/rerank``,
``/v1/score``, audio and whatever else the engines serve: the request goes to an engine as
the client sent it (method, path, query, body, its headers but the hop-by-hop ones and
those its ``Connection`` header names), and the answer comes back as the engine sent it
(status, end-to-end headers, body streamed as it arrives) through the one relay
(:mod:`syshaxd.conductor.relay`). The same API key and body limit apply as everywhere on the
port. The GPU's engines are tried first, then the CPU's; an engine that does not know the
route (a 404 that is not an API error) or cannot be reached passes it to the next, and only
a route no engine serves is a 404 from syshaxd. The request counts against its engine in the
conductor's books while it runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from syshaxd.api.completions import request_id
from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.api.server import Handler
from syshaxd.conductor import Relay, end_to_end, request_id_header
from syshaxd.engines import ConnectionPool, EngineClient, EngineFailure, Exchange, describe_error
from syshaxd.errors import ApiError

log = logging.getLogger("syshaxd.api")
access_log = logging.getLogger("syshaxd.access")

_OWN = frozenset({b"x-request-id"})  # each side of syshaxd gets the request id from syshaxd


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


class NotServed(Exception):
    """The engine does not know the route (a 404 that is not an API error): another may."""


class PassRelay(Relay):
    """An engine's answer to a passed-through request: committed at its head, as the engine sent
    it; an engine's 404 is held to its end, to tell "no such route" (ask the next engine) from
    an API error (the answer). ``final``: a 404 is the answer whatever it says."""

    def __init__(self, reply: Response, engine: str, seconds: float, timeout_message: str, rid: str,
                 finished: Callable[[str], None], final: bool = False) -> None:
        super().__init__(asyncio.get_running_loop(), reply, engine, seconds, timeout_message)
        self.rid = rid
        self.final = final
        self._done = finished
        self._headers: list[tuple[bytes, bytes]] = []

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        self._headers = end_to_end(headers, _OWN)
        self._headers.append(request_id_header(self.rid))
        if status == 404 and not self.final:
            return  # "no such route" or "no such model"? The body says.
        length = next((int(v) for k, v in headers if k == b"content-length" and v.isdigit()), None)
        stream = any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)
        self.commit(status, self._headers, length if status != 204 else None, stream=stream)

    def complete(self, body: bytes) -> None:
        if _openai_error(body):
            self.commit(404, self._headers, len(body))
        else:
            self.fail_early(NotServed())

    def finished(self, outcome: str) -> None:
        self._done(outcome)


def passthrough_route(conductor: Books, timeout: float) -> Handler:
    """The handler for every route that is neither the conductor's nor syshaxd's own."""
    timeout_message = f"request exceeded system.request_timeout ({timeout:g} s)"

    async def handle(request: Request, response: Response) -> None:
        rid = request_id(request) or uuid.uuid4().hex
        target = request.raw_path + (b"?" + request.query if request.query else b"")
        headers = end_to_end(request.headers, _OWN)
        engines = await conductor.passthrough_engines()
        started = time.monotonic()
        failure: ApiError | None = None
        for engine in engines:
            token = conductor.hold(engine)

            def finished(outcome: str, engine: EngineClient = engine, token: object = token) -> None:
                conductor.unhold(engine, token)
                access_log.info("request id=%s kind=passthrough %s %s engine=%s outcome=%s e2e=%.3f", rid,
                                request.method, request.path, engine.name, outcome, time.monotonic() - started)

            relay = PassRelay(response, engine.name, timeout, timeout_message, rid, finished)
            try:
                wire = engine.raw_request(request.method.encode(), target, headers, request.body, rid)
                relay.exchange = await engine.exchange(wire, relay, no_body=request.method == "HEAD")
                await relay.wait_committed()
                return
            except (EngineFailure, NotServed) as exc:
                # unreachable, broken before answering, or no such route: the next engine may serve it
                relay.cancel()
                conductor.unhold(engine, token)
                if isinstance(exc, EngineFailure):
                    failure = ApiError(502, f"engine {engine.name} failed: {exc.message}", type="upstream_error")
            except asyncio.TimeoutError:
                conductor.unhold(engine, token)
                raise ApiError(504, timeout_message, type="timeout") from None
            except BaseException:
                if not relay.over:  # else its end was already told
                    relay.cancel()
                    conductor.unhold(engine, token)
                raise
        if failure is not None:
            raise failure
        raise ApiError(404, f"{request.method} {request.path}: no engine serves this route "
                            f"({', '.join(e.name for e in engines)} answered 404)", type="not_found_error")

    return handle


def forward_route(daemon: ConnectionPool, timeout: float) -> Handler:
    """A worker's handler for the daemon's own routes (health, metrics, models, docs): the
    request goes to the daemon's API as the client sent it, the answer comes back as is."""
    timeout_message = f"the daemon did not answer within {timeout:g} s"

    async def handle(request: Request, response: Response) -> None:
        rid = request_id(request) or uuid.uuid4().hex
        target = request.raw_path + (b"?" + request.query if request.query else b"")
        extra = b"".join(b"%s: %s\r\n" % (k, v) for k, v in end_to_end(request.headers, _OWN))
        wire = (b"%s %s HTTP/1.1\r\nhost: syshaxd\r\ncontent-length: %d\r\nx-request-id: %s\r\n%s\r\n"
                % (request.method.encode(), target, len(request.body), rid.encode("latin-1"), extra) + request.body)
        try:
            conn = await daemon.acquire()
        except OSError as exc:
            raise ApiError(503, f"syshaxd's daemon process cannot be reached: {describe_error(exc)}",
                           type="service_unavailable") from None
        relay = PassRelay(response, "daemon", timeout, timeout_message, rid, _nothing, final=True)
        relay.exchange = Exchange(daemon, wire, relay, no_body=request.method == "HEAD")
        relay.exchange.start(conn)
        try:
            await relay.wait_committed()
        except EngineFailure as exc:
            raise ApiError(502, f"syshaxd's daemon process failed: {exc.message}", type="upstream_error") from None
        except asyncio.TimeoutError:
            raise ApiError(504, timeout_message, type="timeout") from None

    return handle


def _nothing(outcome: str) -> None:
    """A forwarded request is counted and logged by the daemon that answers it."""


def _openai_error(body: bytes) -> bool:
    """Whether a 404's body is an API error (no such model) rather than "no such route"."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and (isinstance(data.get("error"), dict) or data.get("object") == "error")
