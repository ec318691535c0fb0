"""NumaPanel: utilisation per NUMA node and a folded heat strip of every core."""

from __future__ import annotations

from rich.console import RenderableType
from textual.reactive import reactive
from textual.widget import Widget

from console.model import fold_cores
from console.render import numa_label_width, numa_panel
from syshaxd.schema import HostModel


class NumaPanel(Widget):
    """Every core of the host, folded to fit; cores bound to the CPU engine are underlined."""

    DEFAULT_CSS = """
    NumaPanel {
        height: auto;
        border: round $panel-lighten-2;
        border-title-style: bold;
    }
    """

    host: reactive[HostModel] = reactive(HostModel, layout=True)
    """The host as the daemon last reported it."""

    def on_mount(self) -> None:
        self.border_title = "NUMA · cores"

    def update(self, host: HostModel) -> None:
        """Show new host readings (the only entry point)."""
        self.host = host
        self.border_title = f"NUMA · {len(host.cpu_percent)} cores"

    def render(self) -> RenderableType:
        """The heat strip folded to the panel's width."""
        width = max(self.content_size.width, 12)
        labels = numa_label_width(self.host)
        layout = fold_cores(self.host, max(width - labels, 1))
        return numa_panel(self.host, layout, labels, width)
