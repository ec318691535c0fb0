"""How the monitor reads an engine's ``/metrics`` and ``/slots``: a GET, its status and its text.

The daemon scrapes every engine each round, busy or not, on the event loop that relays every
token: :class:`PoolFetcher` does it over the same lean keep-alive connections the requests use
(one small pool per engine, apart from the requests'). :class:`HttpxFetcher` does it with an
``httpx`` client, which tests give the monitor to put a ``MockTransport`` in front of it.
"""

from __future__ import annotations

from typing import Protocol

import httpx

from syshaxd.config import EngineSpec
from syshaxd.engines import EngineClient, EngineFailure


class ScrapeError(Exception):
    """A scrape got no answer; ``refused`` when nothing listens (the engine is down at once)."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class Fetcher(Protocol):
    """GET a path of an engine."""

    async def get(self, engine: EngineSpec, path: str) -> tuple[int, str]:
        """The status and the body's text.

        Raises:
            ScrapeError: no answer (refused, reset, garbage).
        """
        ...

    async def aclose(self) -> None:
        """Close what it holds open."""
        ...


class PoolFetcher:
    """Scrapes over a keep-alive pool per engine (httptools, no client library)."""

    def __init__(self) -> None:
        self._clients: dict[str, EngineClient] = {}

    async def get(self, engine: EngineSpec, path: str) -> tuple[int, str]:
        client = self._clients.get(engine.url)
        if client is None:
            client = self._clients[engine.url] = EngineClient(engine)
        try:
            status, body = await client.get(path)
        except EngineFailure as exc:
            raise ScrapeError(exc.message, refused="refused" in exc.message) from None
        return status, body.decode("utf-8", "replace")

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


class HttpxFetcher:
    """Scrapes with an httpx client (closed by whoever made it)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def get(self, engine: EngineSpec, path: str) -> tuple[int, str]:
        try:
            response = await self.client.get(engine.url + path)
        except httpx.ConnectError as exc:
            raise ScrapeError(f"cannot connect: {exc or 'connection refused'}", refused=True) from None
        except httpx.HTTPError as exc:
            raise ScrapeError(f"{type(exc).__name__}: {exc}") from None
        return response.status_code, response.text

    async def aclose(self) -> None:
        pass
