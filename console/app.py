"""The syshax console: a live Textual dashboard of the daemon that can steer it.

One worker follows the daemon's event stream and never lets an exception out (that would
close the app); a timer renders at most ``refresh`` times a second. Every change goes
through PATCH /v1/config and is shown only once the daemon confirms it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Footer

from console.client import ControlClient, ControlError
from console.decisionlog import DecisionLog
from console.keys import VIEWS, ConsoleKeys
from console.model import (
    DEVICES,
    Device,
    History,
    engines_of,
)
from console.render import fmt_memory, fmt_uptime
from console.widgets.conductor import ConductorPanel
from console.widgets.decisions import DecisionLogPanel
from console.widgets.device import DevicePanel
from console.widgets.numa import NumaPanel
from console.widgets.status import Status, StatusBar
from syshaxd.schema import DecisionModel, StateModel

BACKOFF_MIN = 0.5
#: Seconds between decision log updates: a table redraw costs more than every other
#: panel together, and a log that scrolls faster than once a second is not read anyway.
LOG_INTERVAL = 1.0
BACKOFF_MAX = 5.0
#: Seconds a screenshot waits past --after for the first state from the daemon to be drawn.
SHOT_PATIENCE = 30.0


class ConsoleApp(ConsoleKeys):
    """The operator's console for one syshaxd."""

    TITLE = "syshax console"
    CSS = """
    #devices, #host {
        height: auto;
    }
    DevicePanel, NumaPanel {
        width: 1fr;
    }
    Screen.-wide ConductorPanel {
        width: 48;
    }
    Screen.-disconnected DevicePanel, Screen.-disconnected NumaPanel,
    Screen.-disconnected ConductorPanel, Screen.-disconnected DecisionLogPanel {
        text-opacity: 50%;
    }
    Screen.-view-devices #host, Screen.-view-devices DecisionLogPanel,
    Screen.-view-host #devices, Screen.-view-host DecisionLogPanel,
    Screen.-view-decisions #devices, Screen.-view-decisions #host {
        display: none;
    }
    Screen.-view-devices #devices, Screen.-view-host #host {
        layout: vertical;
    }
    Screen.-view-host ConductorPanel {
        width: 1fr;
    }
    """
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    def __init__(
        self,
        connect: Callable[[], ControlClient],
        *,
        refresh: float = 4.0,
        readonly: bool = False,
        keymap: dict[str, str] | None = None,
        max_log: int = 500,
        screenshot: tuple[Path, float] | None = None,
    ) -> None:
        """A console that reaches the daemon through clients made by ``connect``.

        Args:
            connect: makes the client for a connection attempt (asked again on each one,
                so a daemon that moves its socket is found).
            refresh: renders per second, at most.
            readonly: never offer changes.
            keymap: binding id -> keys, overriding ``BINDINGS``.
            max_log: decisions kept in the log.
            screenshot: save an SVG screenshot to this path after this many seconds, then exit.
        """
        super().__init__()
        self._connect = connect
        self._client: ControlClient | None = None
        self._refresh_interval = 1.0 / refresh
        self._operator_keys = keymap or {}
        self.readonly = readonly
        self.readonly_reason: str | None = "started with --readonly" if readonly else None
        self.connected = False
        self.state: StateModel | None = None
        self.history = History()
        self.decisions = DecisionLog(cap=max_log)
        self.side: Device = "gpu"
        self._engine_index: dict[Device, int] = {"gpu": 0, "cpu": 0}
        self._view = 1
        self._dirty = True
        self._log_shown_at = 0.0
        self._log_shown: DecisionLog | None = None
        self._pending: list[DecisionModel] = []
        self._problem: str | None = None
        self._retry_at: float | None = None
        self._last_data: float | None = None
        self._shot_by = 0.0
        self._max_log = max_log
        self._shot_plan = screenshot

    def compose(self) -> ComposeResult:
        # Kept as attributes: App.query_one searches the *active* screen, which is a
        # modal while help or a confirmation is open, and the timer must still find these.
        self.status_bar = StatusBar()
        self.devices = {device: DevicePanel(device, id=device) for device in DEVICES}
        self.numa = NumaPanel()
        self.conductor = ConductorPanel()
        self.log_panel = DecisionLogPanel(self._max_log)
        yield self.status_bar
        with Horizontal(id="devices"):
            yield from self.devices.values()
        with Horizontal(id="host"):
            yield self.numa
            yield self.conductor
        yield self.log_panel
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.main_screen = self.screen
        if self._operator_keys:
            self.set_keymap(self._operator_keys)
        self.main_screen.add_class("-view-overview")
        self.set_interval(self._refresh_interval, self._tick)
        self.follow_events()
        if self._shot_plan is not None:
            self._shot_by = time.monotonic() + self._shot_plan[1] + SHOT_PATIENCE
            self.set_timer(self._shot_plan[1], self._shoot)

    def _shoot(self) -> None:
        assert self._shot_plan is not None
        # A screenshot is of the daemon's numbers: wait until the first state is drawn (a slow
        # daemon or a loaded machine), but not for ever (a daemon that never answers is shown so).
        if (self._last_data is None or self._dirty) and time.monotonic() < self._shot_by:
            self.set_timer(0.1, self._shoot)
            return
        path = self._shot_plan[0]
        self.save_screenshot(path.name, str(path.parent or "."))
        self.exit()

    async def on_unmount(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    # -- data --------------------------------------------------------------------------

    @work(exclusive=True, group="events")
    async def follow_events(self) -> None:
        """Follow the daemon's events for as long as the app runs, reconnecting as needed."""
        backoff = BACKOFF_MIN
        while True:
            problem: str
            try:
                client = self._client_for_attempt()
                self.on_state(await client.state())
                self._set_connected(True)
                backoff = BACKOFF_MIN
                async for event in client.events():
                    if isinstance(event, StateModel):
                        self.on_state(event)
                    elif isinstance(event, DecisionModel):
                        self.on_decisions((event,))
                    else:
                        self.on_change(event)
                problem = "the daemon closed the event stream"
            except asyncio.CancelledError:
                raise
            except ControlError as exc:
                problem = exc.message
            except Exception as exc:  # a bug here must not close the operator's console
                problem = f"internal error: {type(exc).__name__}: {exc}"
            self._problem = problem
            self._retry_at = time.monotonic() + backoff
            self._set_connected(False)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    def _client_for_attempt(self) -> ControlClient:
        client = self._connect()
        if self._client is not None and client is not self._client:
            old = self._client
            self.run_worker(old.aclose(), group="cleanup")
        self._client = client
        return client

    def on_state(self, state: StateModel) -> None:
        """Take a new state from the daemon (rendered at the next tick)."""
        self.state = state
        self.history = self.history.push(state)
        if state.recent_decisions:
            # The stream sends each decision too; these fill gaps (a reconnect, a drop).
            self._pending.extend(state.recent_decisions)
        self._last_data = time.monotonic()
        self._dirty = True

    def on_decisions(self, decisions: Iterable[DecisionModel]) -> None:
        """Take routing decisions from the event stream (merged at the next log update)."""
        self._pending.extend(decisions)

    def _set_connected(self, connected: bool) -> None:
        if connected:
            self._problem = None
            self._retry_at = None
        if connected != self.connected:
            self.connected = connected
            self.main_screen.set_class(not connected, "-disconnected")
            self.refresh_bindings()
        self._dirty = True

    # -- rendering ---------------------------------------------------------------------

    def _tick(self) -> None:
        if not self.connected:
            self.status_bar.update(self._status())
        if not self._dirty:
            self._tick_log()
            return
        self._dirty = False
        state = self.state
        with self.batch_update():
            self.status_bar.update(self._status())
            if state is not None:
                for device, panel in self.devices.items():
                    panel.update(
                        engines_of(state, device),
                        state.config,
                        self.history,
                        selected=device == self.side,
                        selected_engine=self.selected_engine_name(device),
                    )
                self.numa.update(state.host)
                self.conductor.update(state.conductor)
            self._tick_log()

    def _tick_log(self) -> None:
        now = time.monotonic()
        first = self._log_shown is None or not self._log_shown.items
        if self._pending and (first or now - self._log_shown_at >= LOG_INTERVAL):
            # Merged here, at most once per log update, not per event: a busy box sends
            # dozens of decisions a second and each merge walks the whole log.
            self.decisions = self.decisions.add(self._pending)
            self._pending = []
        if self.decisions is not self._log_shown and (first or now - self._log_shown_at >= LOG_INTERVAL):
            self._log_shown_at = now
            self._log_shown = self.decisions
            self.log_panel.update(self.decisions)

    def _status(self) -> Status:
        now = time.monotonic()
        state = self.state
        return Status(
            connected=self.connected,
            socket=str(self._client.socket_path) if self._client else "",
            problem=self._problem,
            retry_in=round(max(self._retry_at - now, 0.0)) if self._retry_at is not None else None,
            data_age=fmt_uptime(now - self._last_data) if self._last_data is not None and not self.connected else None,
            version=state.version if state else None,
            uptime=fmt_uptime(state.uptime) if state else None,
            memory=fmt_memory(state.memory) if state else None,
            side=self.side,
            engine=self.selected_engine_name(self.side),
            readonly=self.readonly,
            readonly_reason=self.readonly_reason,
            view=VIEWS[self._view],
        )
