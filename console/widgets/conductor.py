"""ConductorPanel: the admission queue, request rates, TTFT, decisions and the policy."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from console.render import conductor_panel
from syshaxd.schema import ConductorStatsModel


class ConductorPanel(Widget):
    """The conductor's own counters."""

    DEFAULT_CSS = """
    ConductorPanel {
        height: auto;
        width: 30;
        border: round $panel-lighten-2;
        border-title-style: bold;
    }
    """

    stats: reactive[ConductorStatsModel] = reactive(ConductorStatsModel)
    """The conductor's counters as the daemon last reported them."""

    def __init__(self) -> None:
        """An empty panel until the first counters."""
        super().__init__()
        self._lines = 0
        self._text: tuple[ConductorStatsModel, int, Text] | None = None

    def on_mount(self) -> None:
        self.border_title = "conductor"

    def update(self, stats: ConductorStatsModel) -> None:
        """Show new counters (the only entry point)."""
        self.stats = stats
        # Relayout (costly) only when the number of lines changes.
        lines = len(self.render().plain.split("\n"))
        if lines != self._lines:
            self._lines = lines
            self.refresh(layout=True)

    def render(self) -> Text:
        """The counters at the panel's width (built once per reading and width)."""
        width = max(self.content_size.width, 16)
        if self._text is None or self._text[0] is not self.stats or self._text[1] != width:
            self._text = (self.stats, width, conductor_panel(self.stats, width))
        return self._text[2]
