"""The console's keys: bindings, what each action does, and the writes they send.

A base class of the app so that the keys live in one place (footer, help screen, command
palette and keymap ids all read ``BINDINGS``) and the app module keeps to data and drawing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.keys import format_key
from textual.screen import ModalScreen, Screen

from console.client import ControlClient, ControlError, Forbidden
from console.model import (
    Device,
    apply_change,
    auto_pd_patch,
    batch_patch,
    describe_change,
    drain_patch,
    engines_of,
    policy_patch,
)
from console.widgets.confirm import ConfirmModal
from console.widgets.decisions import DecisionLogPanel
from console.widgets.help import HelpScreen
from console.widgets.requests import AdviceScreen, RequestsScreen
from syshaxd.schema import ConfigChangeModel, PatchBody, StateModel

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
    "requests": "The last finished requests; enter shows one decision's inputs and what happened",
    "advice": "The latest advice of `syshax advise` (replayed settings, the recommendation)",
    "help": "Show every key and how to read the panels",
    "quit": "Quit the console",
}


class ConsoleKeys(App[None]):
    """Key bindings and actions; the app subclass supplies the data they act on."""

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
        Binding("R", "requests", "requests", id="requests"),
        Binding("a", "advice", "advice", id="advice"),
    ]

    # Set up by the app:
    state: StateModel | None
    side: Device
    readonly: bool
    readonly_reason: str | None
    connected: bool
    main_screen: Screen[object]
    log_panel: DecisionLogPanel
    _client: ControlClient | None
    _engine_index: dict[Device, int]
    _operator_keys: dict[str, str]
    _view: int
    _dirty: bool

    def on_change(self, change: ConfigChangeModel) -> None:
        """Apply a change the daemon confirmed (the app keeps the state)."""
        if self.state is not None:
            self.state = apply_change(self.state, change)
            self._dirty = True

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

    def action_requests(self) -> None:
        """Open the requests view (reads the daemon's record of finished requests)."""
        if self._client is None:
            self.notify("not connected to the daemon", severity="warning")
            return
        self.push_screen(RequestsScreen(self._client.requests))

    def action_advice(self) -> None:
        """Open the advice view."""
        if self._client is None:
            self.notify("not connected to the daemon", severity="warning")
            return
        self.push_screen(AdviceScreen(self._client.advice))

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
