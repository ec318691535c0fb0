"""A stand-in for the connection a :class:`~syshaxd.api.response.Response` writes to."""

from __future__ import annotations

from syshaxd.api.response import Response


class Wire:
    """The connection's side of a response: records what was written and how it ended."""

    writable = True

    def __init__(self) -> None:
        self.data = b""
        self.done = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.data += data

    def response_done(self, response: Response) -> None:
        self.done = True

    async def wait_writable(self) -> None:
        return None

    def abort(self) -> None:
        self.aborted = True
