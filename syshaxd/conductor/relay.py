"""An engine's answer relayed to the client from the engine connection's own callbacks.

Until the client has a byte, the answer can still go elsewhere: the relay holds what it read
(for a stream, until its first event is known to be an event and not an error event; for a
whole answer, until it is complete and is JSON), and a failure then is handed back to the
dispatcher, which resubmits. Once committed, a stream's bytes go on to the client as they
came, in the same callback that read them -- no re-parsing, one write for however many
chunks arrived together -- while the relay counts events and keeps the last bytes, to know
at the end whether ``[DONE]`` came. Every way an answer can end (clean, truncated, engine
lost, timeout, client gone) finishes the flight once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from syshaxd.conductor.flight import Flight
from syshaxd.conductor.reply import EVENT_STREAM, Reply, request_id_header, send_whole
from syshaxd.engines import (
    EngineClient,
    EngineFailure,
    EngineRejected,
    Exchange,
    describe_error,
    json_answer,
)
from syshaxd.errors import engine_error_message, sse_error
from syshaxd.sse import DONE, Decoder, NotEventStream

_DONE_EVENT = b"data: " + DONE
#: Bytes read before a stream's first event is complete, at most, before it is passed on anyway.
_SNIFF_LIMIT = 64 * 1024

#: Called with what failed before the client had a byte (EngineFailure, EngineRejected, TimeoutError).
EarlyFailure = Callable[[BaseException], None]


class Relay:
    """What every relay shares: the commit, the deadline, the client leaving, stopping the engine."""

    def __init__(self, flight: Flight, engine: EngineClient, reply: Reply, timeout_message: str) -> None:
        self.flight = flight
        self.engine = engine
        self.reply = reply
        self.exchange: Exchange | None = None
        self.timeout_message = timeout_message
        self.committed = False
        self._failed: EarlyFailure | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._early: BaseException | None = None
        self._status = 0
        self._held: list[bytes] = []  # bytes read before the commit
        self._over = False
        self._timer = asyncio.get_running_loop().call_later(max(0.0, flight.remaining()), self._expire)
        reply.when_gone(self._client_gone)

    # -- how the dispatcher learns the outcome of the first part ---------------------

    def on_early_failure(self, callback: EarlyFailure) -> None:
        """Call ``callback`` if the engine fails before the client has a byte."""
        self._failed = callback
        if self._early is not None:
            callback(self._early)

    async def wait_committed(self) -> None:
        """Return once the client has the first bytes (or left).

        Raises:
            EngineFailure: the engine failed before that (worth resubmitting).
            EngineRejected: the engine refused the request (4xx).
            asyncio.TimeoutError: the request's deadline passed first.
        """
        if self.committed or self._over and self._early is None:
            return
        if self._early is not None:
            raise self._early
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        except BaseException:
            self._stop()
            raise

    def cancel(self) -> None:
        """Give up before the request was sent (no connection could be had)."""
        self._stop()

    # -- Sink ------------------------------------------------------------------------

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._status = status

    def on_body(self, data: bytes) -> None:
        raise NotImplementedError

    def on_end(self) -> None:
        raise NotImplementedError

    def on_lost(self, exc: BaseException) -> None:
        if not self._over and not self.committed:
            self._fail_early(EngineFailure(self.engine.name, describe_error(exc)))

    # -- shared steps ----------------------------------------------------------------

    def _commit(self) -> None:
        self.committed = True
        self.flight.first_byte(self.engine)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail_early(self, exc: BaseException) -> None:
        self._stop()
        self._early = exc
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        elif self._failed is not None:
            self._failed(exc)

    def _status_failure(self, body: bytes) -> Exception:
        if 400 <= self._status < 500 and self._status not in (408, 429):
            return EngineRejected(self.engine.name, self._status, body)
        return EngineFailure(self.engine.name, engine_error_message(self._status, body), status=self._status)

    def _expire(self) -> None:
        if not self._over:
            if self.committed:
                self._expired_late()
            else:
                self._fail_early(asyncio.TimeoutError())

    def _expired_late(self) -> None:
        self._stop()

    def _client_gone(self) -> None:
        if not self._over:
            self._stop()
            self.flight.finish(self._gone_outcome(), tokens=self._tokens())
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

    def _tokens(self) -> int | None:
        return None

    def _gone_outcome(self) -> str:
        return "client_disconnect"

    def _stop(self) -> None:
        """Stop reading the engine (closing its connection aborts its request) and the timer."""
        if self._over:
            return
        self._over = True
        self._timer.cancel()
        exchange = self.exchange
        if exchange is not None and exchange.conn is not None and exchange.conn.sink is not None:
            exchange.abort()


class StreamRelay(Relay):
    """A streamed answer, passed through as it comes once its first event is in."""

    def __init__(self, flight: Flight, engine: EngineClient, reply: Reply, timeout_message: str) -> None:
        super().__init__(flight, engine, reply, timeout_message)
        self._decoder: Decoder | None = Decoder(strict=True)
        self._events = 0
        self._tail = b""

    def on_body(self, data: bytes) -> None:
        if self._over:
            return
        if self.committed:
            self.reply.write(data)
            self._events += data.count(b"data:")
            self._tail = (self._tail + data)[-64:] if len(data) < 64 else data[-64:]
            self.flight.answering(self.engine)
            return
        self._held.append(data)
        if self._status == 200:
            self._sniff(data)

    def on_end(self) -> None:
        if self._over:
            return
        if not self.committed:
            body = b"".join(self._held)
            if self._status != 200:
                self._fail_early(self._status_failure(body))
                return
            if not body:
                self._fail_early(EngineFailure(self.engine.name, "engine ended the stream before sending anything"))
                return
            self._pass_on()
        if _DONE_EVENT in self._tail:
            self._close("ok")
        else:
            self._close("truncated", sse_error(f"engine {self.engine.name} ended the stream without [DONE]; "
                                               "the answer is incomplete"))

    def on_lost(self, exc: BaseException) -> None:
        if self._over:
            return
        if not self.committed:
            super().on_lost(exc)
        elif _DONE_EVENT in self._tail:
            # The answer was complete; only the connection's end was lost (the engine died
            # right after [DONE]). Nothing may follow [DONE].
            self._close("ok")
        else:
            self._close("engine_error", sse_error(f"engine {self.engine.name} failed mid-stream: "
                                                  f"{describe_error(exc)}"))

    def _sniff(self, data: bytes) -> None:
        assert self._decoder is not None
        try:
            events = self._decoder.feed(data)
        except NotEventStream:
            self._fail_early(EngineFailure(self.engine.name, "engine stream is not Server-Sent Events"))
            return
        for event in events:
            if event.data.startswith(b'{"error"'):
                self._fail_early(EngineFailure(self.engine.name, engine_error_message(200, event.data)))
                return
        if events or sum(map(len, self._held)) >= _SNIFF_LIMIT:
            self._pass_on()

    def _pass_on(self) -> None:
        """The client gets the status line and what was read so far; from here bytes flow through."""
        self._decoder = None
        held, self._held = b"".join(self._held), []
        self.reply.start(200, (*EVENT_STREAM, request_id_header(self.flight.request_id)))
        self.reply.flow(self.exchange)
        self.reply.write(held)
        self._events = held.count(b"data:")
        self._tail = held[-64:]
        self._commit()

    def _expired_late(self) -> None:
        self._close("timeout", sse_error(self.timeout_message, type="timeout", code="504"))

    def _tokens(self) -> int | None:
        return max(0, self._events - 2)

    def _gone_outcome(self) -> str:
        # A client that read [DONE] may close before the engine's end of the response reaches
        # us: it had the whole answer.
        return "ok" if self.committed and _DONE_EVENT in self._tail else "client_disconnect"

    def _close(self, outcome: str, error: bytes = b"") -> None:
        """End the client's stream (an error event first when there is one), then the flight: the
        client has its last bytes before the books are written."""
        self._stop()
        if error and not self.reply.gone:
            self.reply.write(error)
        self.reply.flow(None)
        self.reply.end()
        self.flight.finish(outcome, tokens=self._tokens())


class BodyRelay(Relay):
    """A whole (non-streamed) answer: read to its end, checked to be JSON, then sent."""

    def on_body(self, data: bytes) -> None:
        if not self._over:
            self._held.append(data)

    def on_end(self) -> None:
        if self._over:
            return
        body = b"".join(self._held)
        self._held = []
        if self._status != 200:
            self._fail_early(self._status_failure(body))
            return
        try:
            answer = json_answer(self.engine.name, body)
        except EngineFailure as failure:
            self._fail_early(failure)
            return
        self._over = True
        self._timer.cancel()
        self._commit()
        self.flight.release(self.engine)
        send_whole(self.reply, 200, body, self.flight.request_id)
        usage = answer.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        self.flight.finish("ok", tokens=tokens if isinstance(tokens, int) else None)
