"""DevicePanel: every engine of one device (GPU or CPU) with its cache, counts and rates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import RenderableType
from textual.reactive import reactive
from textual.widget import Widget

from console.model import Device, History
from console.render import DETAIL_WIDTH, device_panel, device_title
from syshaxd.schema import EngineStateModel


class DevicePanel(Widget):
    """One side of the box: its engines, the side's batch limit and KV threshold in the title."""

    DEFAULT_CSS = """
    DevicePanel {
        height: auto;
        border: round $panel-lighten-2;
        border-title-style: bold;
        padding: 0 0;
    }
    DevicePanel.-selected {
        border: heavy $accent;
    }
    """

    engines: reactive[tuple[EngineStateModel, ...]] = reactive(())
    """The device's engines as the daemon last reported them."""
    config: reactive[Mapping[str, Any]] = reactive(dict, always_update=False)
    """The daemon's runtime config (batch limits, KV threshold)."""
    history: reactive[History] = reactive(History)
    """Tokens/s history for the sparklines."""
    selected_engine: reactive[str | None] = reactive(None)
    """The engine ``D`` acts on, when this side is selected."""
    selected: reactive[bool] = reactive(False)
    """Whether this is the side ``+``/``-`` act on."""

    def __init__(self, device: Device, *, id: str | None = None) -> None:
        """A panel for ``device``'s engines."""
        super().__init__(id=id)
        self.device: Device = device
        self.border_title = device.upper()
        self._lines = 0

    def update(
        self,
        engines: tuple[EngineStateModel, ...],
        config: Mapping[str, Any],
        history: History,
        *,
        selected: bool,
        selected_engine: str | None,
    ) -> None:
        """Show new data (the only entry point)."""
        self.engines = engines
        self.config = config
        self.history = history
        self.selected = selected
        self.selected_engine = selected_engine if selected else None
        title = device_title(self.device, config, selected)
        if title != self.border_title:  # setting a title redraws the widget, even unchanged
            self.border_title = title
        # A full layout pass costs more than the repaint: ask for one only when the
        # panel's height changes (an engine added or removed).
        per_engine = 4 if self.content_size.width >= DETAIL_WIDTH else 3
        lines = max(len(engines) * per_engine, 1)
        if lines != self._lines:
            self._lines = lines
            self.refresh(layout=True)

    def watch_selected(self, selected: bool) -> None:
        self.set_class(selected, "-selected")

    def render(self) -> RenderableType:
        """The engines' cards at the panel's width."""
        return device_panel(
            self.engines,
            device=self.device,
            config=self.config,
            history=self.history,
            selected=self.selected_engine,
            width=max(self.content_size.width, 20),
        )
