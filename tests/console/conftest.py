"""Console test fixtures: a control API on a real Unix socket, and a console that records notices."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widget import Widget

from console.app import ConsoleApp
from console.client import ControlClient
from tests.console.fakedaemon import FakeDaemon, FakeServer, recorded_state


@dataclass
class Control:
    """A fake daemon being served, and how to reach it."""

    daemon: FakeDaemon
    server: FakeServer
    path: Path

    async def read_state(self) -> Any:
        """GET /v1/state through a fresh client, as an outside observer would."""
        client = ControlClient(self.path)
        try:
            return await client.state()
        finally:
            await client.aclose()


@pytest.fixture
async def control(short_tmp: Path) -> AsyncIterator[Control]:
    """The recorded state served on a Unix socket until the test ends."""
    path = short_tmp / "control.sock"
    daemon = FakeDaemon(recorded_state(), rate=10)
    server = FakeServer(daemon, path)
    await server.start()
    try:
        yield Control(daemon, server, path)
    finally:
        await server.stop()


class RecordingConsole(ConsoleApp):
    """The console, keeping every notification it shows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notices: list[tuple[str, str, str]] = []  # (severity, title, message)

    def notify(self, message: str, *, title: str = "", severity: Any = "information", **kwargs: Any) -> None:
        self.notices.append((str(severity), title, message))
        super().notify(message, title=title, severity=severity, **kwargs)


def console_for(path: Path, **kwargs: Any) -> RecordingConsole:
    """A console whose connections go to ``path``."""
    clients: dict[Path, ControlClient] = {}

    def connect() -> ControlClient:
        if path not in clients:
            clients[path] = ControlClient(path)
        return clients[path]

    kwargs.setdefault("refresh", 20)
    return RecordingConsole(connect, **kwargs)


def text_of(widget: Widget) -> str:
    """The plain text a widget renders."""
    render = widget.render()
    return str(getattr(render, "plain", render))


async def wait_for(pilot: Pilot[Any], check: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Let the app run until ``check()`` is true, or fail saying what never happened (the
    timeout only bounds a failure: a busy machine makes it happen later)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await pilot.pause(0.05)


async def writes_answered(app: ConsoleApp) -> None:
    """Wait until every write the console has started so far has its answer.

    A write is a worker of the "writes" group that ends once the daemon answered, and the
    daemon records a request before answering it: after this, the daemon's record holds every
    write started by a key handled so far. Tests make sure their keys were handled by waiting
    for the effect of a later key (keys are handled in order), never by a fixed pause.
    """
    writes = [worker for worker in app.workers if worker.group == "writes"]
    if writes:  # an empty list would mean every worker, the event stream's too
        await app.workers.wait_for_complete(writes)
