"""NumaPanel: utilisation per NUMA node and a folded heat strip of every core."""

from __future__ import annotations

from rich.console import RenderableType
from textual.reactive import reactive
from textual.widget import Widget

from console.model import CoreLayout, fold_cores
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

    host: reactive[HostModel] = reactive(HostModel)
    """The host as the daemon last reported it."""

    def __init__(self) -> None:
        """An empty panel until the first host reading."""
        super().__init__()
        self._lines = 0
        self._layout: tuple[HostModel, int, CoreLayout] | None = None

    def on_mount(self) -> None:
        self.border_title = "NUMA · cores"

    def update(self, host: HostModel) -> None:
        """Show new host readings (the only entry point)."""
        self.host = host
        title = f"NUMA · {len(host.cpu_percent)} cores"
        if title != self.border_title:  # setting a title redraws the widget, even unchanged
            self.border_title = title
        # Relayout (costly) only when the strip's height changes, not on every reading.
        lines = self._fold().row_count + 1
        if lines != self._lines:
            self._lines = lines
            self.refresh(layout=True)

    def _fold(self) -> CoreLayout:
        # update() needs the height and render() the cells: fold once per reading and width.
        width = self._strip_width()
        if self._layout is None or self._layout[0] is not self.host or self._layout[1] != width:
            self._layout = (self.host, width, fold_cores(self.host, width))
        return self._layout[2]

    def _strip_width(self) -> int:
        return max(max(self.content_size.width, 12) - numa_label_width(self.host), 1)

    def render(self) -> RenderableType:
        """The heat strip folded to the panel's width."""
        layout = self._fold()
        return numa_panel(self.host, layout, numa_label_width(self.host), max(self.content_size.width, 12))
