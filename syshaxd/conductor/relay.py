"""An engine's answer relayed to the client: the one relay of every route that reaches an engine.

The completion routes (:mod:`syshaxd.conductor.answers`) and pass-through
(:mod:`syshaxd.api.passthrough`) both hand an engine's answer to a :class:`Relay`, which is the
engine connection's sink and writes to the client's :class:`~syshaxd.conductor.reply.Reply`
from the connection's own callbacks. What every route shares lives here:

- **Holding, then committing.** Until the client has a byte, the answer can still go
  elsewhere: the relay holds what it read, and what it holds is judged by the route's kind
  (a completion stream until its first event is known not to be an error; a whole answer to
  its end; an engine's 404 to its end). A failure then is *early*: it is handed back to
  whoever sent the request (the dispatcher resubmits, pass-through asks the next engine).
  Once committed, the bytes go on as they came, one write per read, with flow control.
- **The end.** Every way an answer can end -- complete, truncated, engine lost, deadline,
  client gone -- finishes it once (:meth:`Relay.finished`).
- **One rule for a failure after the first byte:** an event stream that broke between two
  events ends with an OpenAI error event and ``[DONE]``, cleanly, so a client reads the
  reason; any other body (or a stream cut inside an event) is cut by dropping the client's
  connection, so that it cannot take what it got for the whole answer.
- **Headers between two hops:** :func:`end_to_end` drops the hop-by-hop headers and those
  the ``Connection`` header names, in both directions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from syshaxd.conductor.reply import Headers, Reply, end_stream
from syshaxd.engines import EngineFailure, Exchange, describe_error
from syshaxd.errors import ApiError
from syshaxd.sse import DONE

#: Headers that belong to one connection, not to the request or the answer (RFC 9110 7.6.1),
#: and the framing headers each side writes itself.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                        b"proxy-authorization", b"te", b"trailer", b"transfer-encoding", b"upgrade", b"host",
                        b"content-length", b"expect"})
DONE_EVENT = b"data: " + DONE
_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")

#: Called with what failed before the client had a byte (EngineFailure, EngineRejected, TimeoutError, ...).
EarlyFailure = Callable[[BaseException], None]


def end_to_end(headers: Iterable[tuple[bytes, bytes]], drop: frozenset[bytes] = frozenset()
               ) -> list[tuple[bytes, bytes]]:
    """``headers`` (names lower case) without the hop-by-hop ones, those the ``Connection``
    header names, and ``drop``."""
    headers = list(headers)
    named = [name.strip().lower() for key, value in headers if key == b"connection" for name in value.split(b",")]
    gone = HOP_BY_HOP | drop | frozenset(named) if named else HOP_BY_HOP | drop
    return [(key, value) for key, value in headers if key not in gone]


class Relay:
    """One engine's answer on its way to the client; a route's kind says when to commit.

    A kind overrides :meth:`on_head` (commit at once with :meth:`commit`, or hold),
    :meth:`holding` (look at held bytes), :meth:`complete` (the answer ended before it was
    committed), :meth:`verdict` (how a committed answer that ended went), and the books'
    hooks :meth:`started`, :meth:`passing` and :meth:`finished`.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, reply: Reply, engine: str, seconds: float,
                 timeout_message: str) -> None:
        self.loop = loop  # given, not looked up: asyncio.get_running_loop() costs a getpid() each time
        self.reply = reply
        self.engine = engine  # its name, for messages
        self.exchange: Exchange | None = None
        self.timeout_message = timeout_message
        self.status = 0
        self.committed = False
        self.stream = False  # the client's answer is an event stream: errors go inside it
        self.tail = b""  # the last bytes passed on (streams)
        self._held: list[bytes] = []  # read before the commit
        self._ended = False  # the engine's answer is complete (its connection may serve another)
        self._over = False
        self._failed: EarlyFailure | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._early: BaseException | None = None
        self._timer = loop.call_later(max(0.0, seconds), self._expire)
        reply.when_gone(self._client_gone)

    # -- how the sender learns the outcome of the first part ---------------------------

    def on_early_failure(self, callback: EarlyFailure) -> None:
        """Call ``callback`` if the answer fails before the client has a byte."""
        self._failed = callback
        if self._early is not None:
            callback(self._early)

    async def wait_committed(self) -> None:
        """Return once the client has the first bytes (or left).

        Raises:
            BaseException: what failed before that (the kind's early failures, e.g.
                EngineFailure, EngineRejected; asyncio.TimeoutError at the deadline).
        """
        if self.committed or self._over and self._early is None:
            return
        if self._early is not None:
            raise self._early
        self._waiter = self.loop.create_future()
        try:
            await self._waiter
        except BaseException:
            self.stop()
            raise

    def cancel(self) -> None:
        """Give up before the request was sent (no connection could be had)."""
        self.stop()

    # -- Sink: the engine connection's callbacks ---------------------------------------

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The engine's status and headers (the kind commits here, or holds)."""
        self.status = status

    def on_body(self, data: bytes) -> None:
        if self._over:
            return
        if self.committed:
            data = self.outgoing(data)
            if data:
                self.reply.write(data)
            self._passed(data)
            return
        self._held.append(data)
        self.holding(data)

    def on_end(self, last: bytes = b"") -> None:
        if self._over:
            return
        self._ended = True
        if not self.committed:
            if last:
                self._held.append(last)
                self.holding(last)
                last = b""
                if self._over:
                    return
            if not self.committed:
                self.complete(b"".join(self._held))
                if self._over or not self.committed:
                    return
        else:
            last = self.outgoing(last, end=True)
            if last:
                self._passed(last)
        outcome, error = self.verdict()
        self.close(outcome, error, last)

    def _passed(self, data: bytes) -> None:
        if self.stream:
            self.tail = (self.tail + data)[-64:] if len(data) < 64 else data[-64:]
        self.passing(data)

    def on_lost(self, exc: BaseException) -> None:
        if self._over:
            return
        if not self.committed:
            self.fail_early(EngineFailure(self.engine, describe_error(exc)))
        else:
            self.close("engine_error", ApiError(502, f"engine {self.engine} failed mid-stream: {describe_error(exc)}",
                                                type="upstream_error"))

    # -- what a kind overrides ---------------------------------------------------------

    def holding(self, data: bytes) -> None:
        """``data`` was read and held: commit, fail early, or wait for more."""

    def complete(self, body: bytes) -> None:
        """The answer ended before it was committed (``body``: all of it): commit, or fail early."""
        raise NotImplementedError

    def verdict(self) -> tuple[str, ApiError | None]:
        """How a committed answer that ended went: the outcome, and the error the client is told."""
        return "ok", None

    def outgoing(self, data: bytes, end: bool = False) -> bytes:
        """What of ``data``, read from a committed answer, the client gets (``end``: the engine's
        answer is over). As it came, unless a kind keeps something back."""
        return data

    def started(self) -> None:
        """The client has the first bytes."""

    def passing(self, data: bytes) -> None:
        """More of a committed answer (``data``) went to the client."""

    def finished(self, outcome: str) -> None:
        """The answer is over, however it ended (once)."""

    def gone_outcome(self) -> str:
        """How the answer went when the client left before its end."""
        return "client_disconnect"

    # -- the steps a kind takes ----------------------------------------------------------

    def commit(self, status: int, headers: Headers, length: int | None = None, body: bytes | None = None,
               stream: bool = False) -> None:
        """Start the client's answer with what was held (or ``body`` instead); from here bytes
        flow through. ``stream``: it is an event stream, whose errors are events."""
        held = body if body is not None else b"".join(self._held)
        self._held = []
        if stream:
            held = self.outgoing(held, end=self._ended)
        self.committed = True
        self.stream = stream
        self.reply.start(status, headers, length, held)
        if not self._ended:  # an ended answer's connection is back in the pool: never pause it
            self.reply.flow(self.exchange)
        if held and stream:
            self.tail = held[-64:]
        self.started()
        if held and stream:
            self.passing(held)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def fail_early(self, exc: BaseException) -> None:
        """The answer failed before the client had a byte: hand ``exc`` to the sender."""
        self.stop()
        self._early = exc
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        elif self._failed is not None:
            self._failed(exc)

    def close(self, outcome: str, error: ApiError | None = None, last: bytes = b"") -> None:
        """End the client's answer (``last``: its final bytes, not yet written) -- with ``error``
        by the one rule for a failure after the first byte -- then finish: the client has its
        last bytes before the books are written."""
        self.stop()
        if error is None:
            self.reply.flow(None)
            self.reply.end(last)
            self.finished(outcome)
            return
        if last:
            self.reply.write(last)
        if self.stream and self.tail.endswith(_EVENT_ENDS):
            end_stream(self.reply, error)
        else:
            self.reply.abort()
        self.finished(outcome)

    def stop(self) -> None:
        """Stop reading the engine (closing its connection aborts its request) and the timer."""
        if self._over:
            return
        self._over = True
        self._timer.cancel()
        exchange = self.exchange
        if exchange is not None and exchange.conn is not None and exchange.conn.sink is not None:
            exchange.abort()

    @property
    def over(self) -> bool:
        """Whether the answer is over for this relay (ended, failed, or the client left)."""
        return self._over

    # -- timers and the client ---------------------------------------------------------

    def _expire(self) -> None:
        if self._over:
            return
        if self.committed:
            self.close("timeout", ApiError(504, self.timeout_message, type="timeout"))
        else:
            self.fail_early(asyncio.TimeoutError())

    def _client_gone(self) -> None:
        if self._over:
            return
        self.stop()
        self.finished(self.gone_outcome())
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
