"""DecisionLogPanel: the latest routing decisions in a DataTable, pausable and filterable."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Input

from console.decisionlog import DecisionLog, decision_key, diff_rows, row_cells, visible

COLUMNS = (("time", "time"), ("request", "request"), ("dev", "device"), ("mode", "mode"),
           ("TTFT est→real", "ttft"), ("reason", "reason"))  # fmt: skip


class FilterInput(Input):
    """The ``/`` filter line; escape gives up the edit."""

    BINDINGS = [Binding("escape", "cancel", "Cancel filter", show=False)]

    def action_cancel(self) -> None:
        """Hand the cancel to the log panel."""
        parent = self.parent
        if isinstance(parent, DecisionLogPanel):
            parent.cancel_filter()


class DecisionLogPanel(Widget):
    """The decision log: rows diffed by key, newest at the bottom, at most ``max_rows`` kept."""

    DEFAULT_CSS = """
    DecisionLogPanel {
        height: 1fr;
        min-height: 4;
        border: round $panel-lighten-2;
        border-title-style: bold;
    }
    DecisionLogPanel DataTable {
        height: 1fr;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    DecisionLogPanel FilterInput {
        display: none;
        height: 1;
        border: none;
        padding: 0 1;
    }
    DecisionLogPanel.-filtering FilterInput {
        display: block;
    }
    """

    paused: reactive[bool] = reactive(False)
    """Whether new decisions are held back (space)."""
    filter_text: reactive[str] = reactive("")
    """The filter words (``/``); empty shows everything."""
    pending: reactive[int] = reactive(0)
    """Decisions that arrived while paused."""

    def __init__(self, max_rows: int = 500, *, id: str | None = None) -> None:
        """A log that shows at most ``max_rows`` rows."""
        super().__init__(id=id)
        self.max_rows = max_rows
        self._log = DecisionLog(cap=max_rows)
        self._shown_log = self._log
        self._before_edit = ""

    def compose(self) -> ComposeResult:
        table: DataTable[str] = DataTable(cursor_type="none", zebra_stripes=True)
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield FilterInput(placeholder="filter: words, or id: device: mode: engine: reason: outcome:")

    def on_mount(self) -> None:
        self._retitle()
        # Follow the newest row until the operator scrolls up; scrolling back down resumes.
        self.table.anchor()

    @property
    def table(self) -> DataTable[str]:
        """The rows."""
        return self.query_one(DataTable)

    def update(self, log: DecisionLog) -> None:
        """Show a new log (held back while paused) — the only data entry point."""
        if log is self._log:
            return
        if self.paused:
            known = {decision_key(d) for d in self._log.items}
            self.pending += sum(1 for d in log.items if decision_key(d) not in known)
            self._log = log
            return
        self._log = log
        self._apply()

    def toggle_pause(self) -> None:
        """Pause or resume the log."""
        self.paused = not self.paused
        if not self.paused:
            self.pending = 0
            self._apply()

    def start_filter(self) -> None:
        """Open the filter line."""
        self._before_edit = self.filter_text
        self.add_class("-filtering")
        box = self.query_one(FilterInput)
        box.value = self.filter_text
        box.focus()

    def cancel_filter(self) -> None:
        """Close the filter line, keeping the filter that was there before the edit."""
        self.remove_class("-filtering")
        self.filter_text = self._before_edit
        self.table.focus()

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter_text = event.value

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.filter_text = event.value.strip()
        self.remove_class("-filtering")
        self.table.focus()

    def watch_filter_text(self) -> None:
        self._apply()

    def watch_paused(self) -> None:
        self._retitle()

    def watch_pending(self) -> None:
        self._retitle()

    def _retitle(self) -> None:
        title = "decisions"
        if self.filter_text:
            title += f" · filter “{self.filter_text}”"
        if self.paused:
            title += f" · ⏸ PAUSED ({self.pending} new)"
        self.border_title = title
        self.border_subtitle = "space pause · / filter"

    def _apply(self) -> None:
        if not self.is_mounted:
            return
        self._retitle()
        table = self.table
        wanted = visible(self._log, self.filter_text, self.max_rows)
        wanted_keys = [decision_key(d) for d in wanted]
        shown = [row_key.value or "" for row_key in table.rows]
        old = {decision_key(d): d for d in self._shown_log.items}
        changed = [decision_key(d) for d in wanted if old.get(decision_key(d), d) != d]
        diff = diff_rows(shown, wanted_keys, changed)
        by_key = {decision_key(d): d for d in wanted}
        with self.app.batch_update():
            if not diff.append_only:
                # Only a new filter or a late, older decision gets here: refill once.
                table.clear()
                for key in wanted_keys:
                    table.add_row(*row_cells(by_key[key]), key=key)
            else:
                for key in diff.remove:
                    table.remove_row(key)
                for key in diff.update:
                    for (_, column), cell in zip(COLUMNS, row_cells(by_key[key]), strict=True):
                        table.update_cell(key, column, cell)
                for key in diff.add:
                    table.add_row(*row_cells(by_key[key]), key=key)
        self._shown_log = self._log
