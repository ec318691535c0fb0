"""ConductorPanel: the admission queue, request rates, TTFT, decisions and the policy."""

from __future__ import annotations

from rich.console import RenderableType
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

    stats: reactive[ConductorStatsModel] = reactive(ConductorStatsModel, layout=True)
    """The conductor's counters as the daemon last reported them."""

    def on_mount(self) -> None:
        self.border_title = "conductor"

    def update(self, stats: ConductorStatsModel) -> None:
        """Show new counters (the only entry point)."""
        self.stats = stats

    def render(self) -> RenderableType:
        """The counters at the panel's width."""
        return conductor_panel(self.stats, max(self.content_size.width, 16))
