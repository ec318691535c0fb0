"""The ledger's wire: JSON messages, one per line, over a Unix socket pair.

The daemon keeps the books; each worker process (``services.conductor.workers``) serves
API connections and tells the books what its requests do over one of these. Messages are
small dicts with an ``op``; both sides write many per loop iteration under load, so writes
are gathered and sent once per iteration (one system call for all of them).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, cast

log = logging.getLogger("syshaxd.ledger")

#: A line longer than this is a broken peer, not a message.
MAX_LINE = 1 << 20

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_decode = json.JSONDecoder().decode


class Wire(asyncio.Protocol):
    """Line-delimited JSON both ways; subclasses handle :meth:`on_message` and :meth:`on_lost`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message; it goes out at the end of this loop iteration."""
        if self.lost:
            return
        self._out.append(_encode(message).encode() + b"\n")
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.transport is not None and not self.transport.is_closing() and self._out:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if b"\n" not in data:
            if len(self._buffer) > MAX_LINE:
                log.error("ledger peer sent %d bytes without a line end: closing", len(self._buffer))
                self.close()
            return
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                message = _decode(line.decode())
            except ValueError:
                log.error("ledger peer sent a line that is not JSON: %r", line[:200])
                continue
            try:
                self.on_message(message)
            except Exception:  # one bad message must not take the books down
                log.exception("ledger message %r failed", message.get("op") if isinstance(message, dict) else message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._out.clear()
        self.on_lost(exc)

    def close(self) -> None:
        """Send what is queued, then close."""
        self._flush()
        if self.transport is not None:
            self.transport.close()

    def on_message(self, message: dict[str, Any]) -> None:
        """One message from the peer."""
        raise NotImplementedError

    def on_lost(self, exc: Exception | None) -> None:
        """The peer is gone."""
        raise NotImplementedError
