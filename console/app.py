"""The syshax console: a live Textual dashboard of the daemon that can steer it.

One worker follows the daemon's event stream and never lets an exception out (that would
close the app); a timer renders at most ``refresh`` times a second. Every change goes
through PATCH /v1/config and is shown only once the daemon confirms it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.keys import format_key
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer

from console.client import ControlClient, ControlError, Forbidden
from console.decisionlog import DecisionLog
from console.model import (
    DEVICES,
    Device,
    History,
    apply_change,
    auto_pd_patch,
    batch_patch,
    describe_change,
    drain_patch,
    engines_of,
    policy_patch,
)
from console.render import fmt_uptime
from console.widgets.conductor import ConductorPanel
from console.widgets.confirm import ConfirmModal
from console.widgets.decisions import DecisionLogPanel
from console.widgets.device import DevicePanel
from console.widgets.help import HelpScreen
from console.widgets.numa import NumaPanel
from console.widgets.status import Status, StatusBar
from syshaxd.schema import ConfigChangeModel, DecisionModel, PatchBody, StateModel

BACKOFF_MIN = 0.5
#: Seconds between decision log updates: a table redraw costs more than every other
#: panel together, and a log that scrolls faster than once a second is not read anyway.
LOG_INTERVAL = 1.0
BACKOFF_MAX = 5.0
VIEWS = {1: "overview", 2: "devices", 3: "host", 4: "decisions"}
WRITE_ACTIONS = frozenset({"batch", "toggle_pd", "cycle_policy", "drain", "save", "reload"})

#: Binding id -> the longer text the help screen and the command palette show.
DESCRIPTIONS: dict[str, str] = {
    "select_gpu": "Select the GPU side (again: next GPU engine)",
    "select_cpu": "Select the CPU side (again: next CPU engine)",
    "batch_up": "Raise the selected side's batch limit by one",
    "batch_down": "Lower the selected side's batch limit by one",
    "toggle_pd": "Toggle auto_pd_offload (GPU prefill + CPU decode)",
    "cycle_policy": "Switch to the next scheduling policy",
    "drain": "Drain or re-enable the selected engine (asks first)",
    "save": "Save the running runtime config (overrides file)",
    "reload": "Reload the config files, as SIGHUP does",
    "pause": "Pause or resume the decision log",
    "filter": "Filter the decision log",
    "view_1": "View: overview",
    "view_2": "View: devices",
    "view_3": "View: host and conductor",
    "view_4": "View: decision log",
    "help": "Show every key and how to read the panels",
    "quit": "Quit the console",
}


class ConsoleApp(App[None]):
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
    # Footer order is priority order: on 80 columns the tail is cut, so help and quit come
    # early; everything is in the help screen and the command palette anyway.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "select('gpu')", "GPU", id="select_gpu"),
        Binding("c", "select('cpu')", "CPU", id="select_cpu"),
        Binding("plus", "batch(1)", "limit", key_display="+/-", id="batch_up"),
        Binding("minus", "batch(-1)", "limit", show=False, id="batch_down"),
        Binding("p", "toggle_pd", "auto-PD", id="toggle_pd"),
        Binding("P", "cycle_policy", "policy", id="cycle_policy"),
        Binding("D", "drain", "drain", id="drain"),
        Binding("question_mark", "help", "help", key_display="?", id="help"),
        Binding("q", "quit", "quit", id="quit"),
        Binding("s", "save", "save", id="save"),
        Binding("r", "reload", "reload", id="reload"),
        Binding("space", "pause", "pause log", id="pause"),
        Binding("slash", "filter", "filter log", key_display="/", id="filter"),
        Binding("1", "view(1)", "overview", show=False, id="view_1"),
        Binding("2", "view(2)", "devices", show=False, id="view_2"),
        Binding("3", "view(3)", "host", show=False, id="view_3"),
        Binding("4", "view(4)", "log", show=False, id="view_4"),
    ]

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
            self.set_timer(self._shot_plan[1], self._shoot)

    def _shoot(self) -> None:
        assert self._shot_plan is not None
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

    def on_change(self, change: ConfigChangeModel) -> None:
        """Apply a change the daemon confirmed (event or PATCH answer)."""
        if self.state is not None:
            self.state = apply_change(self.state, change)
            self._dirty = True

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
            side=self.side,
            engine=self.selected_engine_name(self.side),
            readonly=self.readonly,
            readonly_reason=self.readonly_reason,
            view=VIEWS[self._view],
        )

    def selected_engine_name(self, device: Device) -> str | None:
        """The engine ``D`` acts on for a side."""
        engines = engines_of(self.state, device)
        if not engines:
            return None
        return engines[self._engine_index[device] % len(engines)].name

    # -- keys --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out changes while they cannot work (read-only, disconnected, no data).

        While help or a question is open only quitting works: a key meant for the modal
        must not change the daemon underneath it.
        """
        if isinstance(self.screen, ModalScreen) and action not in ("quit", "command_palette"):
            return False
        return True if self._usable(action) else None

    def _usable(self, action: str) -> bool:
        return action not in WRITE_ACTIONS or not (self.readonly or not self.connected or self.state is None)

    def action_select(self, device: Device) -> None:
        """Select a side; selecting it again moves to its next engine."""
        if self.side == device:
            self._engine_index[device] += 1
        self.side = device
        self._dirty = True

    def action_batch(self, delta: int) -> None:
        """Move the selected side's batch limit."""
        if self.state is None:
            return
        body = batch_patch(self.state.config, self.side, delta)
        if body is None:
            self.notify(f"the daemon reports no {self.side.upper()} batch limit", severity="warning")
            return
        self._send(f"{self.side.upper()} batch limit", body)

    def action_toggle_pd(self) -> None:
        """Toggle auto_pd_offload."""
        if self.state is not None:
            self._send("auto-PD offload", auto_pd_patch(self.state.config))

    def action_cycle_policy(self) -> None:
        """Switch to the next policy."""
        if self.state is not None:
            self._send("policy", policy_patch(self.state.config))

    def action_drain(self) -> None:
        """Drain or re-enable the selected engine, after a confirmation."""
        name = self.selected_engine_name(self.side)
        engine = next((e for e in engines_of(self.state, self.side) if e.name == name), None)
        if engine is None:
            self.notify(f"no {self.side.upper()} engine to drain", severity="warning")
            return
        if engine.draining:
            question = f"Re-enable {engine.name}? It takes new requests again."
        else:
            question = f"Drain {engine.name}? It takes no new requests; running ones finish."
        body = drain_patch(engine)

        def answered(yes: bool | None) -> None:
            if yes:
                self._send(f"{engine.name} draining", body)

        self.push_screen(ConfirmModal(question), answered)

    def action_save(self) -> None:
        """Persist the running runtime config."""
        self._call("save", lambda client: client.save())

    def action_reload(self) -> None:
        """Reread the config files."""
        self._call("reload", lambda client: client.reload())

    def action_pause(self) -> None:
        """Pause or resume the decision log."""
        self.log_panel.toggle_pause()

    def action_filter(self) -> None:
        """Edit the decision log filter."""
        self.log_panel.start_filter()

    def action_view(self, number: int) -> None:
        """Switch views: 1 overview, 2 devices, 3 host, 4 decisions."""
        self.main_screen.remove_class(*(f"-view-{name}" for name in VIEWS.values()))
        self._view = number
        self.main_screen.add_class(f"-view-{VIEWS[number]}")
        self._dirty = True

    def action_help(self) -> None:
        """Show the help screen."""
        self.push_screen(HelpScreen(list(self.key_help())))

    def key_help(self) -> Iterable[tuple[str, str, str, bool]]:
        """(keys as typed, description, binding id, usable now) for every binding."""
        active = {b.binding.id: b for b in self.main_screen.active_bindings.values()}
        for binding in self._bindings_list():
            keys = self._operator_keys.get(binding.id or "", binding.key).split(",")
            shown = " ".join(format_key(k) for k in keys)
            usable = active[binding.id].enabled if binding.id in active else True
            yield shown, DESCRIPTIONS.get(binding.id or "", binding.description), binding.id or "", usable

    @classmethod
    def _bindings_list(cls) -> list[Binding]:
        return [b for b in cls.BINDINGS if isinstance(b, Binding)]

    @classmethod
    def binding_ids(cls) -> list[str]:
        """The ids a keymap file may rebind."""
        return [b.id for b in cls._bindings_list() if b.id]

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The palette offers every key's action (those usable now) besides Textual's own."""
        yield from super().get_system_commands(screen)
        for binding in self._bindings_list():
            action = binding.action.split("(")[0]
            # Not check_action: the palette itself is a modal screen while it asks.
            if binding.id in ("quit", "help") or not self._usable(action):
                continue
            title = DESCRIPTIONS.get(binding.id or "", binding.description)
            yield SystemCommand(title, f"key: {binding.key_display or binding.key}", self._runner(binding.action))

    def _runner(self, action: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await self.run_action(action)

        return run

    # -- writes ------------------------------------------------------------------------

    def _send(self, what: str, body: PatchBody) -> None:
        self._call(what, lambda client: client.patch(body))

    def _call(self, what: str, call: Callable[[ControlClient], Awaitable[ConfigChangeModel]]) -> None:
        if self._client is None:
            return
        client = self._client
        self.run_worker(self._write(what, client, call), group="writes")

    async def _write(
        self, what: str, client: ControlClient, call: Callable[[ControlClient], Awaitable[ConfigChangeModel]]
    ) -> None:
        try:
            change = await call(client)
        except Forbidden as exc:
            self.readonly = True
            self.readonly_reason = exc.message
            self.refresh_bindings()
            self._dirty = True
            self.notify(f"{exc.message}\nThe console is read-only now.", title=f"{what}: refused", severity="error")
        except ControlError as exc:
            self.notify(exc.message, title=f"{what}: refused", severity="error", timeout=8)
        except Exception as exc:  # never let a write close the console
            self.notify(f"{type(exc).__name__}: {exc}", title=f"{what}: failed", severity="error")
        else:
            self.on_change(change)
            self.notify(describe_change(change), title=what)


def main(argv: list[str] | None = None) -> int:
    """The ``syshax-console`` command."""
    from console.cli import run

    return run(argv)
