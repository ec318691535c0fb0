"""HelpScreen: every key with what it does, and how to read the panels."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

LEGEND = """\
[b]States[/b]  ● UP   ◐ STALE (scrapes missed: numbers are old)   ✗ DOWN   ○ WAIT (not scraped yet)
         DRAIN: takes no new requests   OFF: disabled
[b]Device[/b]  KV ███░┃░ cache usage, ┃ = the KV threshold · run n/limit · wait · swap or pre-empt
         infl = the conductor's in-flight requests · dec/pre = decode/prefill tokens/s
[b]NUMA[/b]    one cell per core, ·▁▄█ = idle → 100%, underlined = bound to the CPU engine
[b]Log[/b]     filter words match any column; id: device: mode: engine: reason: outcome: narrow it
Ctrl+P opens the command palette: every action above by name.
Rebind keys with a keymap file (--keymap, or ~/.config/syshax/console-keys.yaml)."""


class HelpScreen(ModalScreen[None]):
    """The key list (with each key's binding id, for keymap files) and a legend."""

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > VerticalScroll {
        width: 90%;
        max-width: 100;
        height: 90%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    """

    BINDINGS = [
        Binding("escape", "dismiss", "close help", key_display="esc"),
        Binding("question_mark,q", "dismiss", "close help", show=False),
    ]

    def __init__(self, keys: Sequence[tuple[str, str, str, bool]]) -> None:
        """Help for ``keys``: (key display, description, binding id, currently usable)."""
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=True, header_style="bold", expand=False)
        table.add_column("key")
        table.add_column("does")
        table.add_column("binding id", style="dim")
        for key, description, binding_id, usable in self.keys:
            note = "" if usable else "  (unavailable now)"
            table.add_row(Text(key, style="bold"), description + note, binding_id)
        with VerticalScroll():
            yield Static(Text.from_markup("[b]syshax console — keys[/b]  (esc closes)\n"))
            yield Static(table)
            yield Static(Text.from_markup("\n" + LEGEND))
