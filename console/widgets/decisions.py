"""DecisionLogPanel: the latest routing decisions in a DataTable, pausable and filterable."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Input

from console.decisionlog import DecisionLog, decision_key, diff_rows, row_cells, visible

#: Rows beyond ``max_rows`` a table may hold before the oldest are trimmed in one batch
#: (a fifth of ``max_rows``, at most this many).
TRIM_SLACK = 100

#: (label, key, width): fixed widths spare DataTable measuring every new cell; the reason,
#: last, takes what is left and is cut at the panel's edge.
COLUMNS = (("time", "time", 8), ("request", "request", 10), ("dev", "device", 5), ("mode", "mode", 5),
           ("TTFT est→real", "ttft", 13), ("reason", "reason", None))  # fmt: skip


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
        self.slack = min(TRIM_SLACK, max(max_rows // 5, 1))
        self._log = DecisionLog(cap=max_rows)
        self._shown_log = self._log
        self._shown_filter = ""
        self._before_edit = ""

    def compose(self) -> ComposeResult:
        table: DataTable[str] = DataTable(cursor_type="none")
        for label, key, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table
        yield FilterInput(placeholder="filter: words, or id: device: mode: engine: reason: outcome:")

    def on_mount(self) -> None:
        self.border_subtitle = "space pause · / filter"
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
        if title != self.border_title:  # setting a title redraws the widget, even unchanged
            self.border_title = title

    def _apply(self) -> None:
        if not self.is_mounted:
            return
        self._retitle()
        table = self.table
        wanted = visible(self._log, self.filter_text, self.max_rows)
        wanted_keys = [key for key, _ in wanted]
        shown = [row_key.value or "" for row_key in table.rows]
        old = dict(zip(self._shown_log.keys, self._shown_log.items, strict=True))
        changed = [key for key, d in wanted if old.get(key, d) != d]
        diff = diff_rows(shown, wanted_keys, changed)
        by_key = dict(wanted)
        remove = diff.remove
        if (
            self.filter_text == self._shown_filter
            and tuple(shown[: len(remove)]) == remove
            and len(shown) + len(diff.add) <= self.max_rows + self.slack
        ):
            # Only the oldest rows fell off the cap: DataTable.remove_row re-indexes every
            # row and relayouts the screen, so trim in batches instead of on every update.
            remove = ()
        with self.app.batch_update():
            if not diff.append_only:
                # Only a new filter or a late, older decision gets here: refill once.
                table.clear()
                for key in wanted_keys:
                    table.add_row(*row_cells(by_key[key]), key=key)
            else:
                for key in remove:
                    table.remove_row(key)
                for key in diff.update:
                    for (_, column, _), cell in zip(COLUMNS, row_cells(by_key[key]), strict=True):
                        table.update_cell(key, column, cell)
                for key in diff.add:
                    table.add_row(*row_cells(by_key[key]), key=key)
        self._shown_log = self._log
        self._shown_filter = self.filter_text
