"""The console driven by keys (Textual pilot) against a control API on a real Unix socket."""

from __future__ import annotations

from textual.command import CommandPalette
from textual.widgets import Button, DataTable

from console.model import AUTO_PD, CPU_BATCH, GPU_BATCH, POLICY
from console.widgets.conductor import ConductorPanel
from console.widgets.confirm import ConfirmModal
from console.widgets.decisions import DecisionLogPanel
from console.widgets.device import DevicePanel
from console.widgets.help import HelpScreen
from console.widgets.numa import NumaPanel
from console.widgets.status import StatusBar
from tests.console.conftest import Control, console_for, text_of, wait_for, writes_answered
from tests.console.fakedaemon import sample_decision


async def test_panels_show_the_numbers_the_daemon_reports(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")
        await pilot.pause(0.2)
        state = await control.read_state()
        for device in ("gpu", "cpu"):
            panel = app.query_one(f"#{device}", DevicePanel)
            text = text_of(panel)
            for engine in (e for e in state.engines if e.device == device):
                assert engine.name in text
                assert f"run {engine.running}/{engine.batch_limit}" in text
                assert f"infl {engine.inflight}" in text
                assert f"{engine.kv_cache_usage * 100:3.0f}%" in text
        conductor = text_of(app.query_one(ConductorPanel))
        assert f"queue {state.conductor.queue_depth}/{state.conductor.queue_limit}" in conductor
        assert f"gpu/whole {state.conductor.decisions['gpu/whole']}" in conductor
        numa = text_of(app.query_one(NumaPanel))
        assert "bound 0-39" in numa and all(f"N{n}" in numa for n in range(4))
        table = app.query_one(DecisionLogPanel).table
        await wait_for(pilot, lambda: table.row_count == len(state.recent_decisions), "the recorded decisions logged")
        assert "connected" in text_of(app.query_one(StatusBar))


async def test_each_hotkey_changes_the_daemons_config(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        before = await control.read_state()
        assert before.config[GPU_BATCH] is None and before.config["decider.max_num_seqs"] == 16

        await pilot.press("plus")
        await wait_for(pilot, lambda: control.daemon.state.config[GPU_BATCH] == 17, "GPU limit 17")
        assert (await control.read_state()).config[GPU_BATCH] == 17
        await wait_for(pilot, lambda: "limit 17" in str(app.query_one("#gpu", DevicePanel).border_title),
                       "the GPU panel shows the confirmed limit")  # fmt: skip

        await pilot.press("c", "minus")
        await wait_for(pilot, lambda: control.daemon.state.config[CPU_BATCH] == 19, "CPU limit 19")

        await pilot.press("p")
        await wait_for(pilot, lambda: control.daemon.state.config[AUTO_PD] is True, "auto-PD on")

        await pilot.press("P")
        await wait_for(pilot, lambda: control.daemon.state.config[POLICY] == "classic", "policy classic")

        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "the drain question")
        await pilot.press("y")
        await wait_for(pilot, lambda: control.daemon.state.engines[2].draining, "cpu0 draining")

        await pilot.press("s")
        await wait_for(pilot, lambda: control.daemon.saved == 1, "saved")
        await pilot.press("r")
        await wait_for(pilot, lambda: any(t == "reload" for _, t, _ in app.notices), "reload confirmed")

        after = await control.read_state()
        assert after.config[CPU_BATCH] == 19 and after.config[AUTO_PD] is True
        assert after.config[POLICY] == "classic"
        assert [e.name for e in after.engines if e.draining] == ["gpu1", "cpu0"]  # gpu1 was recorded draining
        assert not any(severity == "error" for severity, _, _ in app.notices)


async def test_g_again_selects_the_next_engine_and_d_can_re_enable_it(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        assert app.selected_engine_name("gpu") == "gpu0"
        await pilot.press("g")
        assert app.selected_engine_name("gpu") == "gpu1"  # recorded as draining
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "the question")
        assert "Re-enable gpu1" in app.screen.question  # type: ignore[attr-defined]
        await pilot.press("y")
        await wait_for(pilot, lambda: not control.daemon.state.engines[1].draining, "gpu1 enabled again")


async def test_the_drain_question_defaults_to_no_and_escape_cancels(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "the question")
        assert isinstance(app.focused, Button) and app.focused.id == "no"
        assert "[y]" in str(app.screen.query_one("#yes", Button).label)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal), "closed")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "asked again")
        await pilot.press("enter")  # on the focused "No"
        await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmModal), "closed")
        # A write after the questions: it is the only one the daemon gets.
        await pilot.press("p")
        await wait_for(pilot, lambda: control.daemon.writes, "the auto-PD write received")
        await writes_answered(app)
        assert control.daemon.writes == [("PATCH /v1/config", {AUTO_PD: True})]


async def test_a_422_is_shown_with_its_reason(control: Control) -> None:
    control.daemon.refuse = "decider.cpu_max_batch_size: the CPU engine has only 16 slots (-np 16)"
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await pilot.press("c", "plus")
        await wait_for(pilot, lambda: any(s == "error" for s, _, _ in app.notices), "the refusal")
        severity, title, message = next(n for n in app.notices if n[0] == "error")
        assert message == control.daemon.refuse and "refused" in title
        assert (await control.read_state()).config[CPU_BATCH] == 20
        assert "limit 20" in str(app.query_one("#cpu", DevicePanel).border_title)
        assert not app.readonly


async def test_a_403_turns_the_console_read_only(control: Control) -> None:
    reason = "uid 1000 may read but not change syshaxd (not in group syshax-admin)"
    control.daemon.forbidden = reason
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        assert app.check_action("toggle_pd", ()) is True
        await pilot.press("p")
        await wait_for(pilot, lambda: app.readonly, "read-only")
        assert any(reason in message for _, _, message in app.notices)
        assert app.check_action("toggle_pd", ()) is None  # greyed out in the footer
        assert app.check_action("pause", ()) is True  # watching still works
        await pilot.press("plus", "P", "s", "4")
        await wait_for(pilot, lambda: app.main_screen.has_class("-view-decisions"), "the view key after them handled")
        await writes_answered(app)
        assert control.daemon.writes == [("PATCH /v1/config", {AUTO_PD: True})]  # the refused one alone
        assert "READ-ONLY" in text_of(app.query_one(StatusBar))


async def test_readonly_flag_never_writes(control: Control) -> None:
    app = console_for(control.path, readonly=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await pilot.press("plus", "p", "P", "D", "s", "r", "4")
        await wait_for(pilot, lambda: app.main_screen.has_class("-view-decisions"), "the view key after them handled")
        await writes_answered(app)
        assert control.daemon.writes == [] and not isinstance(app.screen, ConfirmModal)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Pause or resume the decision log" in titles
        assert not any("batch limit" in t for t in titles)


async def test_the_palette_offers_every_action(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        titles = {c.title for c in app.get_system_commands(app.screen)}
        from console.keys import DESCRIPTIONS

        missing = {d for k, d in DESCRIPTIONS.items() if k not in ("help", "quit")} - titles
        assert not missing
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), "the palette")
        for key in "auto_pd":
            await pilot.press("underscore" if key == "_" else key)
        await pilot.pause(0.5)  # the palette searches in the background
        await pilot.press("enter")
        await wait_for(pilot, lambda: control.daemon.state.config[AUTO_PD] is True, "toggled from the palette")


async def test_losing_the_daemon_shows_it_and_a_restart_recovers_without_a_key(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await control.server.stop()
        await wait_for(pilot, lambda: not app.connected, "disconnected")
        await wait_for(pilot, lambda: "DISCONNECTED — retrying" in text_of(app.query_one(StatusBar)), "the banner")
        assert app.screen.has_class("-disconnected")
        assert "gpu0" in text_of(app.query_one("#gpu", DevicePanel))  # last data kept, dimmed
        assert app.check_action("batch", (1,)) is None

        await control.server.start()
        await wait_for(pilot, lambda: app.connected, "reconnected")
        await wait_for(pilot, lambda: "connected syshaxd" in text_of(app.query_one(StatusBar)), "the status line")
        assert not app.screen.has_class("-disconnected")
        await pilot.press("p")
        await wait_for(pilot, lambda: control.daemon.state.config[AUTO_PD] is True, "writes work again")


async def test_the_log_pauses_on_space_and_filters_on_slash(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        panel = app.query_one(DecisionLogPanel)
        table = panel.table
        start = len(control.daemon.state.recent_decisions)
        await wait_for(pilot, lambda: table.row_count == start, "the recorded decisions shown")
        base = control.daemon.state.time
        control.daemon.add_decision(sample_decision(100, base + 1, "gpu"))
        await wait_for(pilot, lambda: table.row_count == start + 1, "a new row")

        await pilot.press("space")
        assert panel.paused
        control.daemon.add_decision(sample_decision(101, base + 2, "cpu"))
        control.daemon.add_decision(sample_decision(102, base + 3, "cpu"))
        await wait_for(pilot, lambda: panel.pending == 2, "two held back")
        assert table.row_count == start + 1 and "PAUSED (2 new)" in str(panel.border_title)
        await pilot.press("space")
        await wait_for(pilot, lambda: table.row_count == start + 3, "released")

        await pilot.press("slash")
        for key in "device:cpu":
            await pilot.press("colon" if key == ":" else key)
        await pilot.press("enter")
        assert panel.filter_text == "device:cpu"
        expected = sum(1 for d in app.decisions.items if d.device == "cpu")
        await wait_for(pilot, lambda: table.row_count == expected, "only CPU rows")
        devices = {table.get_row_at(i)[2] for i in range(table.row_count)}
        assert devices == {"cpu"}
        await writes_answered(app)
        assert app.connected and control.daemon.writes == []  # typing "c"/"p" in the filter changed nothing

        await pilot.press("slash", "escape")
        assert panel.filter_text == "device:cpu"  # escape keeps the filter that was set
        await pilot.press("slash", "ctrl+u", "enter")  # clear it
        await wait_for(pilot, lambda: table.row_count == start + 3, "all rows back")


async def test_number_keys_switch_views_and_question_mark_opens_help(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await pilot.press("4")
        assert not app.query_one("#devices").display and app.query_one(DecisionLogPanel).display
        await pilot.press("2")
        assert app.query_one("#devices").display and not app.query_one(DecisionLogPanel).display
        await pilot.press("3")
        assert app.query_one(NumaPanel).display and not app.query_one("#devices").display
        await pilot.press("1")
        assert app.query_one("#devices").display and app.query_one(DecisionLogPanel).display

        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        keys = {binding_id: key for key, _, binding_id, _ in app.screen.keys}  # type: ignore[attr-defined]
        assert keys["batch_up"] == "+" and keys["pause"] == "space" and keys["cycle_policy"] == "P"
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen), "help closed")


async def test_a_keymap_rebinds_keys(control: Control) -> None:
    app = console_for(control.path, keymap={"toggle_pd": "o"})
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await pilot.press("p", "o")
        await wait_for(pilot, lambda: control.daemon.state.config[AUTO_PD] is True, "o toggled auto-PD")
        await writes_answered(app)
        assert control.daemon.writes == [("PATCH /v1/config", {AUTO_PD: True})]  # from "o" alone
        assert app.query_one(DataTable) is not None


async def test_updates_keep_flowing_under_a_modal_and_its_keys_change_nothing(control: Control) -> None:
    app = console_for(control.path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
        base = control.daemon.state.time
        control.daemon.add_decision(sample_decision(300, base + 1))
        rows = len(control.daemon.state.recent_decisions)
        await wait_for(pilot, lambda: app.log_panel.table.row_count == rows, "the log updated behind the help")
        await pilot.press("p", "P", "plus", "space", "4", "escape")
        await wait_for(pilot, lambda: app.screen is app.main_screen, "help closed by the key after them")
        await writes_answered(app)
        assert control.daemon.writes == [] and not app.log_panel.paused
        assert app.main_screen.has_class("-view-overview")
        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "the question")
        await pilot.press("p", "question_mark", "n")
        # "?" opened no help over the question: "n" after it reached the question and answered it.
        await wait_for(pilot, lambda: app.screen is app.main_screen, "the question answered by the key after them")
        await writes_answered(app)
        assert control.daemon.writes == []


async def test_the_log_stays_capped_and_keeps_the_newest(control: Control) -> None:
    app = console_for(control.path, max_log=10)
    async with app.run_test(size=(100, 40)) as pilot:
        await wait_for(pilot, lambda: app.connected, "connected")
        table = app.log_panel.table
        base = control.daemon.state.time
        for n in range(40):
            control.daemon.add_decision(sample_decision(1000 + n, base + 1 + n))
            if n % 8 == 7:
                await pilot.pause(0.3)
        await wait_for(pilot, lambda: table.row_count and table.get_row_at(table.row_count - 1)[1] == "req-01039",
                       "the newest decision shown last")  # fmt: skip
        assert 10 <= table.row_count <= 10 + app.log_panel.slack
        shown = [table.get_row_at(i)[1] for i in range(table.row_count)]
        assert shown == sorted(shown) and "req-01000" not in shown
        assert len(app.decisions.items) == 10
