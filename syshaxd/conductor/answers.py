"""The completion routes' answers on the one relay (:mod:`syshaxd.conductor.relay`), told to the flight.

A streamed completion is held until its first event is in and is not an error event, then
passed through as it comes; it went well only if ``[DONE]`` came. What the client got is
counted on the way (:mod:`syshaxd.conductor.tally`) for the request's record. A whole (non-streamed)
completion is read to its end and checked to be JSON before the client has a byte. An
engine's error status before that is an early failure: a 4xx the client's fault
(:class:`EngineRejected`), anything else worth resubmitting (:class:`EngineFailure`).
"""

from __future__ import annotations

import asyncio

from syshaxd.conductor.flight import Flight
from syshaxd.conductor.relay import DONE_EVENT, Relay
from syshaxd.conductor.reply import EVENT_STREAM, JSON, Reply, answer_headers
from syshaxd.conductor.tally import StreamCounter, Tally, whole_tally
from syshaxd.engines import EngineClient, EngineFailure, EngineRejected, json_answer
from syshaxd.errors import ApiError, engine_error_message
from syshaxd.sse import Decoder, NotEventStream

#: Bytes read before a stream's first event is complete, at most, before it is passed on anyway.
SNIFF_LIMIT = 64 * 1024
#: Dialects asked for usage on every stream (the client gets it only if it asked): their streams
#: carry no count of their own. llama-server's last chunk has its ``timings``.
ASK_USAGE = frozenset({"vllm-v1", "vllm-v0", "sglang"})
_ASKED = b'"stream_options":{"include_usage":true},'


def asks_usage(flight: Flight, engine: EngineClient) -> bool:
    """Whether ``engine`` is asked for a stream's usage the client did not ask for: the request's
    record then has the engine's counts, and :class:`StreamRelay` keeps the usage chunk back."""
    parsed = flight.parsed
    return (parsed.stream and not parsed.include_usage and engine.spec.dialect in ASK_USAGE
            and "stream_options" not in parsed.body)


def with_usage(body: bytes) -> bytes:
    """The request body asking for usage on the stream (spliced in: the body is not re-encoded)."""
    # A streamed request's body is an object with keys ("stream" at least): a key and a comma
    # after its brace keep it valid JSON.
    start = body.find(b"{")
    if start < 0 or body[:start].strip():
        return body
    return body[:start + 1] + _ASKED + body[start + 1:]


def _without_usage(data: bytes) -> bytes:
    """``data`` (whole events) without the usage-only events (``choices: []``)."""
    blocks = data.split(b"\n\n")
    return b"\n\n".join(block for block in blocks
                         if not (block.startswith(b"data: ") and b'"choices":[]' in block and b'"usage":{' in block))


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

    def passing(self, data: bytes) -> None:
        self.flight.answering(self.up)

    def revoke(self, error: ApiError) -> None:
        """The core took the request back before the client had a byte: the engine's answer is
        stopped (its connection closed, which aborts the request) and ``error`` goes to the sender."""
        if not self.over and not self.committed:
            self.fail_early(error)


class StreamRelay(CompletionRelay):
    """A streamed completion, passed through as it comes once its first event is in."""

    def __init__(self, loop: asyncio.AbstractEventLoop, flight: Flight, engine: EngineClient, reply: Reply,
                 timeout_message: str) -> None:
        super().__init__(loop, flight, engine, reply, timeout_message)
        self._decoder = Decoder(strict=True)
        self._sniffed = 0
        self._counter = StreamCounter(flight.parsed.n)  # what the engine sent, as it goes to the client
        self._strip = asks_usage(flight, engine)  # keep back the usage the client did not ask for
        self._partial = b""  # an event not yet complete, kept back while stripping

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

    def outgoing(self, data: bytes, end: bool = False) -> bytes:
        self._counter.feed(data)  # before stripping: the usage the client does not see counts
        if not self._strip:
            return data
        if self._partial:
            data, self._partial = self._partial + data, b""
        if b"\r" in data:  # not LF-framed as vLLM frames it: pass all on, strip nothing
            self._strip = False
            return data
        if not end:
            cut = data.rfind(b"\n\n") + 2
            data, self._partial = (data[:cut], data[cut:]) if cut >= 2 else (b"", data)
        return _without_usage(data) if b'"choices":[]' in data else data

    def close(self, outcome: str, error: ApiError | None = None, last: bytes = b"") -> None:
        if self._partial:
            # The engine's answer ended inside an event: it goes out as it came, and the one
            # rule for a failure after the first byte sees where the stream broke.
            kept, self._partial = self._partial, b""
            self._passed(kept)
            last = kept + last
        super().close(outcome, error, last)

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
        self.flight.finish(outcome, self._counter.tally())

    def gone_outcome(self) -> str:
        # A client that read [DONE] may close before the engine's end of the response reaches
        # us: it had the whole answer.
        return "ok" if self.committed and DONE_EVENT in self.tail else "client_disconnect"


class BodyRelay(CompletionRelay):
    """A whole (non-streamed) completion: read to its end, checked to be JSON, then sent."""

    _tally: Tally | None = None

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
        self._tally = whole_tally(answer)
        self.commit(200, (*JSON, *answer_headers(self.flight)), len(body), body)

    def started(self) -> None:
        super().started()
        self.flight.release(self.up)  # the engine's part is over: a waiting request may go

    def finished(self, outcome: str) -> None:
        self.flight.finish(outcome, self._tally)

