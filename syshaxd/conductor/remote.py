"""A worker process's side of the ledger: the conductor and its flights, kept by the daemon.

A worker (``services.conductor.workers`` > 1) reads, parses and relays requests with its own
engine connections; what the books must know it tells the daemon's
:class:`~syshaxd.conductor.ledger.LedgerSession` and what routing decides it asks it. So the
dispatcher runs unchanged on a :class:`RemoteConductor` and its :class:`RemoteFlight` s.

Per request that is three messages (admit, first byte, finish) and one answer, gathered
with every other request's into one write per loop iteration. ``answering`` (the engine is
alive) is sent at most once a second per request, not once per chunk.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import astuple
from typing import Any

from syshaxd.conductor.conductor import Route
from syshaxd.conductor.ledger import decision_from, error_from
from syshaxd.conductor.reply import story_headers
from syshaxd.conductor.tally import Tally
from syshaxd.conductor.wire import Wire
from syshaxd.engines import EngineClient
from syshaxd.errors import ApiError
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, Mode, RequestFeatures

#: Seconds between two "still answering" messages of one request.
ANSWERING_EVERY = 1.0


def _gone() -> ApiError:
    return ApiError(503, "syshaxd's daemon process is gone; this worker is stopping", type="service_unavailable")


class RemoteConductor(Wire):
    """Admission, routing questions and pass-through counts, asked of the daemon's books."""

    def __init__(self, engines: Mapping[str, EngineClient], request_timeout: float,
                 on_gone: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self.engines = dict(engines)
        self.request_timeout = request_timeout
        self.on_gone = on_gone
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Route]] = {}
        self._questions: dict[int, asyncio.Future[Any]] = {}

    # -- what the dispatcher asks (dispatch.Admission) ---------------------------------

    def new_flight(self, parsed: ParsedRequest, forced_mode: Mode | None = None,
                   request_id: str | None = None) -> RemoteFlight:
        """A request this worker serves, counted in the daemon's books once admitted."""
        request_id = request_id or os.urandom(16).hex()
        features = RequestFeatures(prompt_tokens=parsed.prompt_tokens, max_tokens=parsed.max_tokens,
                                   stream=parsed.stream, forced_mode=forced_mode,
                                   has_num_decode_tokens=parsed.has_num_decode_tokens, request_id=request_id,
                                   n=parsed.n)
        return RemoteFlight(self, next(self._ids), request_id, parsed, features,
                            time.monotonic() + self.request_timeout)

    def try_admit(self, flight: RemoteFlight) -> Route | None:
        """Never at once: the daemon decides (:meth:`admit`)."""
        if self.lost:
            raise _gone()
        return None

    async def admit(self, flight: RemoteFlight) -> Route:
        """The daemon's route for ``flight``: at once, or after waiting in its queue.

        Raises:
            ApiError: what the daemon refused with (429, 503, 504), or 503 when it is gone.
        """
        if self.lost:
            raise _gone()
        future: asyncio.Future[Route] = asyncio.get_running_loop().create_future()
        self._waiting[flight.fid] = future
        p = flight.parsed
        self.send({"op": "admit", "f": flight.fid, "id": flight.request_id, "kind": p.kind, "stream": p.stream,
                   "max_tokens": p.max_tokens, "prompt_tokens": p.prompt_tokens, "num_decode": p.has_num_decode_tokens,
                   "model": p.model, "messages": p.messages, "temperature": p.temperature, "ask": p.ask.wire(),
                   "trace": dict(p.trace), "key": p.api_key_name, "n": p.n, "probe": p.probe,
                   "forced": flight.features.forced_mode.value if flight.features.forced_mode else None,
                   "age": time.monotonic() - flight.t0})
        try:
            route = await future
        finally:
            self._waiting.pop(flight.fid, None)
        flight.trace = route.trace
        return route

    async def ask(self, message: dict[str, Any]) -> Any:
        """Send a question and wait for the daemon's answer.

        Raises:
            ApiError: the daemon's error, or 503 when it is gone.
        """
        if self.lost:
            raise _gone()
        q = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._questions[q] = future
        self.send({**message, "q": q})
        try:
            return await future
        finally:
            self._questions.pop(q, None)

    # -- what pass-through asks --------------------------------------------------------

    async def passthrough_engines(self) -> list[EngineClient]:
        """The daemon's order of engines for a pass-through route."""
        names = await self.ask({"op": "engines"})
        return [self.engines[name] for name in names]

    def hold(self, engine: EngineClient) -> object:
        """Count a pass-through request against ``engine`` in the daemon's books."""
        if self.lost:
            raise _gone()
        token = next(self._ids)
        self.send({"op": "hold", "h": token, "e": engine.name})
        return token

    def unhold(self, engine: EngineClient, token: object) -> None:
        """The pass-through request is over."""
        self.send({"op": "unhold", "h": token})

    # -- the daemon's messages ---------------------------------------------------------

    def on_message(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "route":
            route = self._waiting.get(message["f"])
            if route is not None and not route.done():
                engines = tuple(self.engines[name] for name in message["engines"])
                route.set_result(Route(decision_from(message["decision"]), engines, message.get("class") or "",
                                       message.get("priority"), message.get("trace") or {}))
        elif op == "refused":
            refused = self._waiting.get(message["f"])
            if refused is not None and not refused.done():
                refused.set_exception(error_from(message["error"]))
        elif op == "answer":
            answer = self._questions.get(message["q"])
            if answer is not None and not answer.done():
                if "error" in message:
                    answer.set_exception(error_from(message["error"]))
                else:
                    answer.set_result(message.get("value"))

    def on_lost(self, exc: Exception | None) -> None:
        for future in [*self._waiting.values(), *self._questions.values()]:
            if not future.done():
                future.set_exception(_gone())
        self.on_gone()


class RemoteFlight:
    """A request a worker serves; every change to the books goes to the daemon."""

    __slots__ = ("_answered", "_class", "_ledger", "deadline", "features", "fid", "finished", "parsed", "request_id",
                 "revoked", "story", "t0", "trace", "ttft")

    def __init__(self, ledger: RemoteConductor, fid: int, request_id: str, parsed: ParsedRequest,
                 features: RequestFeatures, deadline: float) -> None:
        self._ledger = ledger
        self.fid = fid
        self.request_id = request_id
        self.parsed = parsed
        self.features = features
        self.deadline = deadline
        self.t0 = time.monotonic()
        self.ttft: float | None = None
        self.finished = False
        self._answered = 0.0
        self._class = ""
        self.story: tuple[tuple[bytes, bytes], ...] = ()
        self.trace: dict[str, str] = {}  # the daemon's span of this request, as the engines' parent
        #: Never set: the daemon does not take back a worker's request (it cannot know whether
        #: the worker already sent its first byte).
        self.revoked: ApiError | None = None

    def trace_headers(self) -> dict[str, str]:
        """The trace context to send the engines (the daemon's span of this request), or none."""
        return self.trace

    def when_revoked(self, stop: Callable[[ApiError], None]) -> None:
        """Nothing to register: a worker's request is never taken back."""

    def placed(self, service_class: str, device: str | None, engines: str, mode: str, reason: str) -> None:
        """Where the request runs (its answer's headers say so)."""
        self._class = service_class
        self.story = story_headers(self.request_id, service_class, device, engines, mode, reason)

    def remaining(self) -> float:
        """Seconds left before the request times out (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def first_byte(self, engine: EngineClient) -> None:
        """The engine started answering (the daemon stops counting it as merely scheduled)."""
        now = time.monotonic()
        if self.ttft is None:
            self.ttft = now - self.t0
        self._answered = now
        self._ledger.send({"op": "first_byte", "f": self.fid, "e": engine.name, "ttft": self.ttft, "at": now})

    def answering(self, engine: EngineClient) -> None:
        """The engine sent more: the daemon hears it at most once a second."""
        now = time.monotonic()
        if now - self._answered >= ANSWERING_EVERY:
            self._answered = now
            self._ledger.send({"op": "answering", "f": self.fid, "e": engine.name})

    def release(self, engine: EngineClient) -> None:
        """This engine's part is over."""
        self._ledger.send({"op": "release", "f": self.fid, "e": engine.name})

    async def reask(self, features: RequestFeatures) -> Decision:
        """The daemon's policy, asked again mid-request."""
        return decision_from(await self._ledger.ask({"op": "reask", "f": self.fid,
                                                     "generated": features.generated_tokens}))

    async def resubmit(self, failed: EngineClient) -> EngineClient | None:
        """An engine on the other device, reserved by the daemon, or None."""
        name = await self._ledger.ask({"op": "resubmit", "f": self.fid, "e": failed.name})
        return self._ledger.engines[name] if name is not None else None

    def rerouted(self, engine: EngineClient, why: str) -> None:
        """The whole request now runs on ``engine``."""
        self._ledger.send({"op": "rerouted", "f": self.fid, "e": engine.name, "why": why})
        self.placed(self._class, engine.device, engine.name, Mode.WHOLE.value, why)

    def finish(self, outcome: str, tally: Tally | None = None) -> None:
        """The request ended: the daemon releases what it holds and records it, once."""
        if self.finished:
            return
        self.finished = True
        # Token times go as time.monotonic() values: one clock for every process on the host.
        self._ledger.send({"op": "finish", "f": self.fid, "outcome": outcome,
                           "tally": list(astuple(tally)) if tally is not None else None})
