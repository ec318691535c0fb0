"""One client connection of the API port: requests answered one at a time, in order, within the edge limits.

An asyncio protocol; its :class:`~syshaxd.api.reader.RequestReader` turns bytes into
requests within the size limits. What a client holds here is bounded in time too: a head
must be whole within ``head_timeout`` of its first byte (a new connection's first request:
of the connection), a body must not stall longer than ``body_timeout`` between reads (408
and close past either), an idle connection closes after ``keep_alive``, and so does one whose
client does not read the answer it was sent.

A request is handled (checked, routed, answered) only once the answer before it is written
and the client drained it; bytes that arrive meanwhile (a pipelining client) are parsed into
a short queue and reading pauses until the queue is answered. While a request is handled and
no more bytes come, reading stays on, so a client that leaves is seen and what its request
waited for is stopped. The API key is checked once the head is whole, before the body is
read: a refused request costs no body, and ``100 Continue`` goes only to an HTTP/1.1 client
whose request is the one being handled, may pass, and has a body to send. A request that
cannot be read gets its error after the answers before it, then the connection closes; a
closing connection reads (and discards) what the client still sends for :data:`LINGER`
seconds after its last answer (at most :data:`LINGER_BYTES` of it: then reading pauses), so
that those bytes do not reset the connection before the client could read the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from syshaxd.api.deadline import Deadline
from syshaxd.api.gate import Gate
from syshaxd.api.guard import Guard
from syshaxd.api.incoming import Incoming, Refusal
from syshaxd.api.reader import RequestReader
from syshaxd.api.refusals import failed, turned_away
from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.conductor import send_error
from syshaxd.config import EdgeLimits
from syshaxd.engines import set_nodelay
from syshaxd.errors import ApiError

#: A route: answers at once (returns None) or returns what to await for the answer.
Handler = Callable[[Request, Response], Awaitable[None] | None]
#: Seconds, and bytes, a closing connection reads and discards of what the client still sends.
LINGER = 2.0
LINGER_BYTES = 256 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Site(Protocol):
    """What a connection needs of the server it belongs to."""

    limits: EdgeLimits
    gate: Gate
    guard: Guard
    max_body: int
    accepting: bool

    def handler(self, request: Request) -> Handler:
        """The route for ``request``."""
        ...

    def opened(self, conn: HttpConnection) -> None:
        """A connection was accepted."""
        ...

    def closed(self, conn: HttpConnection) -> None:
        """A connection is gone."""
        ...


class HttpConnection(asyncio.Protocol):
    """One client connection: requests read, answered in order."""

    __slots__ = ("_address", "_advancing", "_closing", "_discarded", "_drained", "_finishing", "_lingering",
                 "_parked", "_paused", "_ready_at", "_writable", "admitted", "deadline", "limits", "loop", "reader",
                 "response", "served", "server", "task", "transport")

    loop: asyncio.AbstractEventLoop  # once admitted
    reader: RequestReader
    deadline: Deadline

    def __init__(self, server: Site) -> None:
        # Every accepted socket makes one, a flood's too: what only an admitted connection
        # needs (its parser, its deadline) is made in connection_made.
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.admitted = False
        self.response: Response | None = None  # the answer being written
        self.task: asyncio.Task[None] | None = None  # what the answer awaits
        self.served = 0
        self._finishing: set[asyncio.Task[None]] | None = None  # earlier answers' tasks, still finishing
        self._closing = False  # the daemon is stopping: close after the answer in progress
        self._lingering = False
        self._discarded = 0  # bytes read and dropped while lingering
        self._paused = False
        self._parked = False  # waiting for the client's bytes
        self._advancing = False
        self._writable = True
        self._drained: asyncio.Future[None] | None = None
        self._ready_at = 0.0  # loop time the connection last became free for a request
        self._address: str | None = None  # counted by the gate

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else None
        past_cap = self.server.gate.admit(address)
        if past_cap is not None:
            # At once, and as cheaply as can be: the descriptor is what is short, and a flood
            # brings thousands of these a second.
            self.transport.write(turned_away(past_cap))
            self.transport.close()
            return
        set_nodelay(transport)
        self.admitted = True
        self._address = address
        self.loop = asyncio.get_running_loop()
        local = transport.get_extra_info("sockname")
        ends = ((address, int(peer[1])) if address is not None else None,
                (str(local[0]), int(local[1])) if isinstance(local, tuple) else None)
        self.reader = RequestReader(self.limits, self.server.max_body, ends, self.loop.time, self.server.gate.refused)
        self.deadline = Deadline(self.loop, self._expired)
        self.server.opened(self)
        self._ready_at = self.loop.time()
        self._park()

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        reader = self.reader
        if reader.ended:  # nothing more is read (lingering, or paused with one read in hand)
            if self._lingering:
                self._discarded += len(data)
                if self._discarded > LINGER_BYTES:
                    self._pause()  # the rest waits in the socket until the linger ends
            return
        reader.feed(data)
        self._advance()
        if not self._parked and not self._lingering and (reader.queue or reader.head_began is not None or reader.ended):
            self._pause()  # bytes came that cannot be acted on yet: take no more until they can

    def eof_received(self) -> bool:
        # The client closed its side. HTTP clients do that to abandon a request (there is no
        # way to tell a half-close from a close), so the connection ends and what its request
        # waited for is stopped, as when the connection is lost.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.admitted:
            return
        self.deadline.cancel()
        if self._address is not None:
            self.server.gate.release(self._address)
            self._address = None
        if self.response is not None:
            self.response.lost()
        if self.task is not None and not self.task.done():
            self.task.cancel()  # what the request waited for (admission, an engine) is abandoned
        self._wake_writers()
        self.server.closed(self)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self._wake_writers()
        if self.response is not None:
            self.response.resume()
        elif self.admitted:
            self._advance()  # the client drained the last answer: the next request may go

    # -- answering -----------------------------------------------------------------

    def _advance(self) -> None:
        """Handle the next request if the connection is free for it; else wait for what it needs."""
        if self._advancing:
            return  # an answer ended inside this loop: the loop goes on
        self._advancing = True
        self._parked = False
        queue = self.reader.queue
        try:
            while self.response is None and self.transport is not None and not self._lingering:
                if not self._writable:
                    self.deadline.set(self.loop.time() + self.limits.keep_alive, "drain")
                    return
                if not queue:
                    if self.reader.ended or self._closing:
                        self._close_after_answers()
                    else:
                        self._park()
                    return
                incoming = queue[0]
                if incoming.refusal is not None:
                    queue.clear()
                    self._answer_refusal(incoming.refusal)
                    return
                if not incoming.checked and not self._check(incoming):
                    continue  # refused by the guard, answered
                if not incoming.complete:
                    self._park()
                    return
                queue.popleft()
                self._start(cast(Request, incoming.request))
        finally:
            self._advancing = False

    def _check(self, incoming: Incoming) -> bool:
        """The guard's verdict on the next request, once its head is whole; an error answered if refused."""
        incoming.checked = True
        request = cast(Request, incoming.request)
        denied = self.server.guard.check(request)
        if denied is None:
            if incoming.continue_wanted and not incoming.body_size and not incoming.complete and self.transport:
                self.transport.write(_CONTINUE)
            return True
        self.reader.queue.popleft()
        if not incoming.complete:
            self.reader.ended = True  # its body is not read, so nothing after it can be
        self.response = Response(self, keep_alive=incoming.complete and self._keep(request),
                                 head_only=request.method == "HEAD", http10=request.version == "1.0")
        send_error(self.response, denied)
        return False

    def _keep(self, request: Request) -> bool:
        """Whether the connection stays open after the answer to ``request``."""
        last = self.reader.ended and not self.reader.queue
        return request.keep_alive and not last and not self._closing and self.server.accepting

    def _start(self, request: Request) -> None:
        self.deadline.clear()  # the request's own deadline rules while it is handled
        response = self.response = Response(self, keep_alive=self._keep(request), head_only=request.method == "HEAD",
                                            http10=request.version == "1.0")
        try:
            pending = self.server.handler(request)(request, response)
        except Exception as exc:
            failed(request, response, exc)
            return
        if pending is not None:
            if self.task is not None and not self.task.done():
                self._hold(self.task)  # the last answer is written but its task is still finishing
            self.task = asyncio.ensure_future(self._answer(request, response, pending))

    async def _answer(self, request: Request, response: Response, pending: Awaitable[Any]) -> None:
        try:
            await pending
        except asyncio.CancelledError:
            pass  # the client left
        except Exception as exc:
            failed(request, response, exc)

    def _hold(self, task: asyncio.Task[None]) -> None:
        # The loop keeps only a weak reference to a task: one nobody holds may vanish mid-run.
        if self._finishing is None:
            self._finishing = set()
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    def _answer_refusal(self, refusal: Refusal) -> None:
        send_error(Response(self, keep_alive=False), ApiError(refusal.status, refusal.message, code=refusal.code))
        self._close_after_answers()

    # -- the Carrier protocol (for Response) -----------------------------------------

    def write(self, data: bytes) -> None:
        """Write bytes to the client."""
        if self.transport is not None:
            self.transport.write(data)

    @property
    def writable(self) -> bool:
        """Whether the client's buffer has room."""
        return self._writable

    async def wait_writable(self) -> None:
        """Return once the client's buffer has room or the client is gone."""
        if self._writable or self.transport is None:
            return
        if self._drained is None:
            self._drained = self.loop.create_future()
        await asyncio.shield(self._drained)

    def response_done(self, response: Response) -> None:
        """The current response ended: take the next request, or close."""
        if response is not self.response:
            return
        self.response = None
        self.served += 1
        self._ready_at = self.loop.time()
        if not response.keep_alive:  # its end may be the close itself (HTTP/1.0): nothing may follow
            self.reader.ended = True
            self.reader.queue.clear()
        self._advance()

    def abort(self) -> None:
        """Drop the connection now."""
        if self.transport is not None:
            self.transport.abort()

    # -- lifecycle -------------------------------------------------------------------

    def finish_soon(self) -> None:
        """Close after the answer in progress (the daemon is stopping); now if there is none."""
        self._closing = True
        if self.response is None and self.transport is not None:
            self.transport.close()

    def _close_after_answers(self) -> None:
        """The last answer is written: close, reading what the client still sends for a while."""
        transport = self.transport
        if transport is None or self._lingering:
            return
        self.reader.ended = self._lingering = True
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._resume()
        self.deadline.set(self.loop.time() + LINGER, "linger")

    def _park(self) -> None:
        """Wait for the client's bytes: reading on, and the deadline of what is awaited."""
        self._parked = True
        self._resume()
        reader = self.reader
        if reader.queue:  # the body of the request in turn
            self.deadline.set(self.loop.time() + self.limits.body_timeout, "body")
        elif reader.head_began is not None:  # the rest of a head (a connection's first: counted from the connection)
            began = self._ready_at if self.served == 0 else max(reader.head_began, self._ready_at)
            self.deadline.set(began + self.limits.head_timeout, "head")
        elif self.served == 0:
            self.deadline.set(self._ready_at + self.limits.head_timeout, "first")
        else:
            self.deadline.set(self._ready_at + self.limits.keep_alive, "idle")

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def _expired(self, kind: str) -> None:
        transport = self.transport
        if transport is None:
            return
        if kind in ("idle", "first", "linger"):
            transport.close()
        elif kind == "drain":
            transport.abort()  # the client reads nothing: what waits for it is dropped
        else:
            which = "head" if kind == "head" else "body"
            limit = self.limits.head_timeout if kind == "head" else self.limits.body_timeout
            self.reader.refuse(Refusal(408, f"the request's {which} did not arrive within {limit:g} s "
                                       f"(services.conductor.limits.{which}_timeout)", f"{which}_timeout",
                                       "request_timeout"))
            self._advance()

    def _wake_writers(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None
