"""StatusBar: the top line — connection, daemon, selection and mode, in words and glyphs."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import RenderableType
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class Status:
    """Everything the status line says."""

    connected: bool = False
    socket: str = ""
    problem: str | None = None  # why the last attempt failed
    retry_in: int | None = None  # seconds until the next attempt
    data_age: str | None = None  # how old the shown data is, when disconnected
    version: str | None = None
    uptime: str | None = None  # formatted: an unchanged line is not redrawn
    memory: str | None = None  # the daemon's RSS, formatted
    side: str = "gpu"
    engine: str | None = None
    readonly: bool = False
    readonly_reason: str | None = None
    view: str = "overview"


class StatusBar(Widget):
    """One line at the top; turns into the "disconnected — retrying" banner when the daemon is lost."""

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $boost;
        padding: 0 1;
    }
    StatusBar.-disconnected {
        background: $error;
        color: $text;
        text-style: bold;
    }
    """

    status: reactive[Status] = reactive(Status)
    """What the line shows."""

    def update(self, status: Status) -> None:
        """Show a new status (the only entry point)."""
        self.status = status

    def watch_status(self, status: Status) -> None:
        self.set_class(not status.connected, "-disconnected")

    def render(self) -> RenderableType:
        """The line for the current status."""
        s = self.status
        text = Text()
        if s.connected:
            text.append("● connected ", style="bold green")
            text.append(f"syshaxd {s.version or '?'}")
            if s.uptime is not None:
                text.append(f" up {s.uptime}")
            if s.memory is not None:
                text.append(f" · {s.memory}", style="dim")
        else:
            # Most important first: the line is cut at the terminal's width.
            text.append("✗ DISCONNECTED — retrying")
            if s.retry_in is not None:
                text.append(f" in {s.retry_in}s")
            if s.data_age is not None:
                text.append(f" · data {s.data_age} old")
            if s.problem:
                text.append(f" · {s.problem}")
            if s.readonly:
                text.append(" · READ-ONLY")
            text.truncate(max(self.content_size.width, 10), overflow="ellipsis")
            return text
        text.append("  │ ")
        text.append(f"▶ {s.side.upper()}", style="bold")
        if s.engine:
            text.append(f" {s.engine}")
        text.append(f"  │ {s.view}")
        if s.readonly:
            text.append("  │ ")
            text.append("READ-ONLY", style="bold reverse")
            if s.readonly_reason:
                text.append(f" {s.readonly_reason}", style="dim")
        text.truncate(max(self.content_size.width, 10), overflow="ellipsis")
        return text
