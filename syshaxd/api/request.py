"""One HTTP request as the API port's server read it: method, target, headers, the whole body."""

from __future__ import annotations


class Request:
    """One request as the connection read it."""

    __slots__ = ("api_key_name", "body", "client", "headers", "keep_alive", "method", "path", "query", "raw_path",
                 "server", "version")

    def __init__(self, method: str, raw_path: bytes, path: str, query: bytes, version: str,
                 headers: list[tuple[bytes, bytes]], body: bytes,
                 client: tuple[str, int] | None, server: tuple[str, int] | None, keep_alive: bool = True) -> None:
        self.keep_alive = keep_alive
        self.method = method
        self.raw_path = raw_path
        self.path = path
        self.query = query
        self.version = version
        self.headers = headers
        self.body = body
        self.client = client
        self.server = server
        #: The name of the API key that authenticated it (the guard sets it); None without keys.
        self.api_key_name: str | None = None

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower case), if sent."""
        for key, value in self.headers:
            if key == name:
                return value
        return None
