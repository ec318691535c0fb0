"""The completion routes' answers on the one relay (:mod:`syshaxd.conductor.relay`), told to the flight.

A streamed completion is held until its first event is in and is not an error event, then
passed through as it comes; it went well only if ``[DONE]`` came. A whole (non-streamed)
completion is read to its end and checked to be JSON before the client has a byte. An
engine's error status before that is an early failure: a 4xx the client's fault
(:class:`EngineRejected`), anything else worth resubmitting (:class:`EngineFailure`).
"""

from __future__ import annotations

import asyncio

from syshaxd.conductor.flight import Flight
from syshaxd.conductor.relay import DONE_EVENT, Relay
from syshaxd.conductor.reply import EVENT_STREAM, JSON, Reply, answer_headers
from syshaxd.engines import EngineClient, EngineFailure, EngineRejected, json_answer
from syshaxd.errors import ApiError, engine_error_message
from syshaxd.sse import Decoder, NotEventStream

#: Bytes read before a stream's first event is complete, at most, before it is passed on anyway.
SNIFF_LIMIT = 64 * 1024


class CompletionRelay(Relay):
    """A completion's answer from one engine, counted in the flight's books."""

    def __init__(self, loop: asyncio.AbstractEventLoop, flight: Flight, engine: EngineClient, reply: Reply,
                 timeout_message: str) -> None:
        super().__init__(loop, reply, engine.name, flight.remaining(), timeout_message)
        self.flight = flight
        self.up = engine

    def failure(self, body: bytes) -> Exception:
        """The early failure an error status is: the client's (4xx) or the engine's."""
        if 400 <= self.status < 500 and self.status not in (408, 429):
            return EngineRejected(self.engine, self.status, body)
        return EngineFailure(self.engine, engine_error_message(self.status, body), status=self.status)

    def started(self) -> None:
        self.flight.first_byte(self.up)

    def passing(self) -> None:
        self.flight.answering(self.up)


class StreamRelay(CompletionRelay):
    """A streamed completion, passed through as it comes once its first event is in."""

    def __init__(self, loop: asyncio.AbstractEventLoop, flight: Flight, engine: EngineClient, reply: Reply,
                 timeout_message: str) -> None:
        super().__init__(loop, flight, engine, reply, timeout_message)
        self._decoder = Decoder(strict=True)
        self._sniffed = 0

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status

    def holding(self, data: bytes) -> None:
        if self.status != 200:
            return  # an error's body: judged at its end
        try:
            events = self._decoder.feed(data)
        except NotEventStream:
            self.fail_early(EngineFailure(self.engine, "engine stream is not Server-Sent Events"))
            return
        for event in events:
            if event.data.startswith(b'{"error"'):
                self.fail_early(EngineFailure(self.engine, engine_error_message(200, event.data)))
                return
        self._sniffed += len(data)
        if events or self._sniffed >= SNIFF_LIMIT:
            self._pass_on()

    def complete(self, body: bytes) -> None:
        if self.status != 200:
            self.fail_early(self.failure(body))
        elif not body:
            self.fail_early(EngineFailure(self.engine, "engine ended the stream before sending anything"))
        else:
            self._pass_on()

    def _pass_on(self) -> None:
        """The client gets the status line and what was read so far; from here bytes flow through."""
        self.commit(200, (*EVENT_STREAM, *answer_headers(self.flight)), stream=True)

    def verdict(self) -> tuple[str, ApiError | None]:
        if DONE_EVENT in self.tail:
            return "ok", None
        return "truncated", ApiError(502, f"engine {self.engine} ended the stream without [DONE]; "
                                          "the answer is incomplete", type="upstream_error")

    def on_lost(self, exc: BaseException) -> None:
        if self.committed and not self.over and DONE_EVENT in self.tail:
            # The answer was complete; only the connection's end was lost (the engine died
            # right after [DONE]). Nothing may follow [DONE].
            self.close("ok")
            return
        super().on_lost(exc)

    def finished(self, outcome: str) -> None:
        self.flight.finish(outcome, tokens=max(0, self.events - 2))

    def gone_outcome(self) -> str:
        # A client that read [DONE] may close before the engine's end of the response reaches
        # us: it had the whole answer.
        return "ok" if self.committed and DONE_EVENT in self.tail else "client_disconnect"


class BodyRelay(CompletionRelay):
    """A whole (non-streamed) completion: read to its end, checked to be JSON, then sent."""

    _tokens: int | None = None

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status

    def complete(self, body: bytes) -> None:
        if self.status != 200:
            self.fail_early(self.failure(body))
            return
        try:
            answer = json_answer(self.engine, body)
        except EngineFailure as failure:
            self.fail_early(failure)
            return
        usage = answer.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        self._tokens = tokens if isinstance(tokens, int) else None
        self.commit(200, (*JSON, *answer_headers(self.flight)), len(body), body)

    def started(self) -> None:
        super().started()
        self.flight.release(self.up)  # the engine's part is over: a waiting request may go

    def finished(self, outcome: str) -> None:
        self.flight.finish(outcome, tokens=self._tokens)

