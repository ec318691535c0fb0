"""The requests view (the last finished requests; Enter shows one decision's inputs) and the
advice view (the latest ``syshax advise``). Both read the daemon; neither writes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from console.client import ControlError
from console.requestsview import COLUMNS, advice_view, request_detail, request_row
from syshaxd.schema import AdviceModel, RequestRecordModel

#: Seconds between refreshes of the requests view while it is open.
REFRESH = 2.0
#: Requests the view asks for (newest last in the answer; shown newest first).
SHOWN = 500

_FRAME = """
    {name} {{
        align: center middle;
    }}
    {name} > #frame {{
        width: 96%;
        height: 92%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }}
"""


class RequestsScreen(ModalScreen[None]):
    """The last finished requests, newest first; Enter opens one."""

    DEFAULT_CSS = _FRAME.format(name="RequestsScreen") + """
    RequestsScreen #requests-title { height: 1; }
    RequestsScreen DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("escape,R", "dismiss", "close", key_display="esc"),
        Binding("enter", "open", "decision", show=False),
    ]

    def __init__(self, fetch: Callable[[int], Awaitable[list[RequestRecordModel]]]) -> None:
        super().__init__()
        self.fetch = fetch
        self.records: list[RequestRecordModel] = []  # newest first, as shown

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="frame"):
            yield Static(Text("requests: loading…", style="bold"), id="requests-title")
            table: DataTable[Text] = DataTable(id="requests", cursor_type="row", zebra_stripes=True)
            table.add_columns(*COLUMNS)
            yield table

    async def on_mount(self) -> None:
        await self.reload()
        self.set_interval(REFRESH, self.reload)

    async def reload(self) -> None:
        """Read the daemon's records again; the cursor stays on the same request."""
        title = self.query_one("#requests-title", Static)
        try:
            records = list(reversed(await self.fetch(SHOWN)))
        except ControlError as exc:
            title.update(Text(f"requests: {exc.message}", style="bold red"))
            return
        table = self.query_one(DataTable)
        keep = self.records[table.cursor_row].request_id if self.records and table.cursor_row >= 0 else None
        self.records = records
        table.clear()
        for record in records:
            table.add_row(*request_row(record), key=record.request_id)
        if keep is not None:
            row = next((i for i, r in enumerate(records) if r.request_id == keep), 0)
            table.move_cursor(row=row)
        failed = sum(1 for r in records if r.outcome != "ok")
        title.update(Text.assemble((f"the last {len(records)} finished requests", "bold"),
                                   (f"  ({failed} not ok)  ·  enter: the decision's inputs  ·  esc: close", "dim")))

    def action_open(self) -> None:
        """Show the request under the cursor."""
        table = self.query_one(DataTable)
        if self.records and 0 <= table.cursor_row < len(self.records):
            self.app.push_screen(RequestDetail(self.records[table.cursor_row]))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter (or a click) on a row."""
        self.action_open()


class RequestDetail(ModalScreen[None]):
    """One request: the engines as the policy saw them, the limits, estimates vs what happened."""

    DEFAULT_CSS = _FRAME.format(name="RequestDetail")
    BINDINGS = [Binding("escape,enter", "dismiss", "close", key_display="esc")]

    def __init__(self, record: RequestRecordModel) -> None:
        super().__init__()
        self.record = record

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="frame"):
            yield Static(request_detail(self.record), id="detail")


class AdviceScreen(ModalScreen[None]):
    """The latest advice of ``syshax advise``, or how to get one."""

    DEFAULT_CSS = _FRAME.format(name="AdviceScreen")
    BINDINGS = [Binding("escape,a", "dismiss", "close", key_display="esc")]

    def __init__(self, fetch: Callable[[], Awaitable[AdviceModel | None]]) -> None:
        super().__init__()
        self.fetch = fetch

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="frame"):
            yield Static(Text("advice: loading…"), id="advice")

    async def on_mount(self) -> None:
        shown = self.query_one("#advice", Static)
        try:
            shown.update(advice_view(await self.fetch()))
        except ControlError as exc:
            shown.update(Text(f"advice: {exc.message}", style="bold red"))
