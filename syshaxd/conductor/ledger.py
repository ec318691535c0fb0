"""The daemon's side of the ledger: a worker process's requests, kept in the one set of books.

With ``services.conductor.workers`` above 1, worker processes serve API connections too.
Each has one :class:`LedgerSession` here, over a Unix socket pair: the worker parses and
relays, the daemon admits, routes and counts, exactly as for its own requests (a
:class:`~syshaxd.conductor.flight.BookedFlight` per request, the same queue, the same
policy), so every engine has one admission view whichever process a client reached.
A worker that dies takes nothing with it: its flights finish as ``worker_lost``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from syshaxd.conductor.conductor import Conductor, Route
from syshaxd.conductor.flight import BookedFlight
from syshaxd.conductor.reply import outcome_of
from syshaxd.conductor.tally import Tally
from syshaxd.conductor.wire import Wire
from syshaxd.errors import ApiError
from syshaxd.request import ParsedRequest, ServiceAsk
from syshaxd.routing import Decision, Mode

log = logging.getLogger("syshaxd.ledger")


def error_message(exc: ApiError) -> dict[str, Any]:
    """An ApiError as it crosses the ledger."""
    return {"status": exc.status, "message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code,
            "headers": exc.headers}


def error_from(data: dict[str, Any]) -> ApiError:
    """The ApiError a ledger message carries."""
    return ApiError(int(data["status"]), str(data["message"]), type=data.get("type") or "invalid_request_error",
                    param=data.get("param"), code=data.get("code"), headers=data.get("headers") or None)


def decision_message(decision: Decision) -> dict[str, Any]:
    """A Decision as it crosses the ledger."""
    return {**dataclasses.asdict(decision), "mode": decision.mode.value}


def decision_from(data: dict[str, Any]) -> Decision:
    """The Decision a ledger message carries."""
    return Decision(**{**data, "mode": Mode(data["mode"])})


class LedgerSession(Wire):
    """One worker process's requests in the daemon's books."""

    def __init__(self, conductor: Conductor, worker: str) -> None:
        super().__init__()
        self.conductor = conductor
        self.worker = worker
        self.flights: dict[int, BookedFlight] = {}
        self.admitting: dict[int, asyncio.Task[None]] = {}
        self.holds: dict[int, tuple[str, object]] = {}
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[int] = loop.create_future()  # the worker's pid, once it listens
        self.closed: asyncio.Future[None] = loop.create_future()
        self._engines = conductor.engines_by_name()

    # -- messages --------------------------------------------------------------------

    def on_message(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "admit":
            self._admit(message)
            return
        if op in ("engines", "hold", "unhold"):
            self._passthrough(op, message)
            return
        if op == "ready":
            if not self.ready.done():
                self.ready.set_result(int(message["pid"]))
            return
        flight = self.flights.get(message["f"])
        if flight is None:
            return  # already finished (a late message after a cancel)
        if op == "first_byte":
            if flight.ttft is None:
                # When the worker's client saw it (time.monotonic(): one clock for every process on
                # the host), from the same arrival as the request's end-to-end time.
                at = message.get("at")
                flight.ttft = max(0.0, at - flight.ticket.arrived) if at is not None else message["ttft"]
            flight.first_byte(self._engines[message["e"]])
        elif op == "answering":
            flight.answering(self._engines[message["e"]])
        elif op == "release":
            flight.release(self._engines[message["e"]])
        elif op == "rerouted":
            flight.rerouted(self._engines[message["e"]], message["why"])
        elif op == "reask":
            features = dataclasses.replace(flight.features, generated_tokens=message["generated"])
            self.send({"op": "answer", "q": message["q"], "value": decision_message(flight.reask_now(features))})
        elif op == "resubmit":
            other = flight.take_other(self._engines[message["e"]])
            self.send({"op": "answer", "q": message["q"], "value": other.name if other is not None else None})
        elif op == "finish":
            tally = message.get("tally")
            self._finish(message["f"], message["outcome"], Tally(*tally) if tally is not None else None)
        else:
            log.error("worker %s sent an unknown ledger op %r", self.worker, op)

    def _admit(self, m: dict[str, Any]) -> None:
        fid = m["f"]
        parsed = ParsedRequest(kind=m["kind"], body={}, raw=b"", model=m.get("model") or "", stream=m["stream"],
                               include_usage=False, max_tokens=m["max_tokens"], prompt_tokens=m["prompt_tokens"],
                               has_num_decode_tokens=m["num_decode"], messages=m.get("messages") or 0,
                               temperature=m.get("temperature"), ask=ServiceAsk.from_wire(m.get("ask")),
                               trace=tuple((m.get("trace") or {}).items()), api_key_name=m.get("key"),
                               n=int(m.get("n") or 1), probe=bool(m.get("probe")))
        forced = Mode(m["forced"]) if m.get("forced") else None
        age = float(m.get("age") or 0.0)  # time the request spent in the worker before this
        try:
            flight = self.conductor.new_flight(parsed, forced, m["id"], process=self.worker, age=age)
        except ApiError as exc:  # a class the table does not have
            self.send({"op": "refused", "f": fid, "error": error_message(exc)})
            return
        self.flights[fid] = flight
        try:
            route = self.conductor.try_admit(flight)
        except ApiError as exc:
            self._refuse(fid, flight, exc)
            return
        if route is not None:
            self._route(fid, route, flight)
            return
        task = asyncio.ensure_future(self._wait(fid, flight))
        self.admitting[fid] = task
        task.add_done_callback(lambda _t: self.admitting.pop(fid, None))

    async def _wait(self, fid: int, flight: BookedFlight) -> None:
        try:
            route = await self.conductor.admit(flight)
        except ApiError as exc:
            self._refuse(fid, flight, exc)
            return
        self._route(fid, route, flight)

    def _route(self, fid: int, route: Route, flight: BookedFlight) -> None:
        self.send({"op": "route", "f": fid, "decision": decision_message(route.decision),
                   "engines": [engine.name for engine in route.engines], "class": route.service_class,
                   "priority": route.priority, "trace": flight.trace_headers()})

    def _refuse(self, fid: int, flight: BookedFlight, exc: ApiError) -> None:
        self.flights.pop(fid, None)
        flight.finish(outcome_of(exc))
        self.send({"op": "refused", "f": fid, "error": error_message(exc)})

    def _finish(self, fid: int, outcome: str, tally: Tally | None) -> None:
        task = self.admitting.pop(fid, None)
        if task is not None:
            task.cancel()  # the client left while it waited in line
        flight = self.flights.pop(fid, None)
        if flight is not None:
            flight.finish(outcome, tally)

    def _passthrough(self, op: str, m: dict[str, Any]) -> None:
        if op == "engines":
            try:
                names = [engine.name for engine in self.conductor.passthrough_order()]
            except ApiError as exc:
                self.send({"op": "answer", "q": m["q"], "error": error_message(exc)})
                return
            self.send({"op": "answer", "q": m["q"], "value": names})
        elif op == "hold":
            engine = self._engines[m["e"]]
            try:
                self.holds[m["h"]] = (engine.name, self.conductor.hold(engine))
            except ApiError:
                pass  # stopping: the worker is being stopped too; nothing counted, nothing to undo
        else:
            held = self.holds.pop(m["h"], None)
            if held is not None:
                self.conductor.unhold(self._engines[held[0]], held[1])

    # -- the worker gone -------------------------------------------------------------

    def on_lost(self, exc: Exception | None) -> None:
        for task in self.admitting.values():
            task.cancel()
        self.admitting.clear()
        if self.flights:
            log.warning("worker %s gone with %d requests open: finishing them", self.worker, len(self.flights))
        for fid in list(self.flights):
            self._finish(fid, "worker_lost", None)
        for name, token in self.holds.values():
            self.conductor.unhold(self._engines[name], token)
        self.holds.clear()
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"worker {self.worker} exited before it was ready"))
            self.ready.exception()  # retrieved: nobody need wait for it
        if not self.closed.done():
            self.closed.set_result(None)

