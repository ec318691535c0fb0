"""The console against a real syshaxd with simulator engines (tests/plugins/stack.py).

Each hotkey must change the daemon's config as read back through GET /v1/state; a
refusal must show the daemon's own reason; a daemon restart must be survived without a key.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from console.client import ControlClient
from console.model import AUTO_PD, CPU_BATCH, GPU_BATCH, POLICY
from console.widgets.confirm import ConfirmModal
from syshaxd.schema import StateModel
from tests.console.conftest import RecordingConsole, console_for, text_of, wait_for
from tests.plugins.ports import stop_process


def socket_of(stack: Any) -> Path:
    """Where make_stack puts the control socket."""
    return Path(stack.tmp) / "run" / "control.sock"


async def read_state(path: Path) -> StateModel:
    """GET /v1/state as an outside observer."""
    client = ControlClient(path)
    try:
        return await client.state()
    finally:
        await client.aclose()


async def patch(path: Path, body: dict[str, Any]) -> None:
    """PATCH /v1/config as an outside operator."""
    client = ControlClient(path)
    try:
        await client.patch(body)
    finally:
        await client.aclose()


def chat(url: str, n: int) -> None:
    """A few small chat requests through the conductor."""
    with httpx.Client(timeout=30) as http:
        for i in range(n):
            body = {"model": "ds-32b", "messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 8}
            http.post(f"{url}/v1/chat/completions", json=body).raise_for_status()


def start_daemon(stack: Any) -> subprocess.Popen[bytes]:
    """Start syshaxd again with the stack's config (what systemd does after a crash)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
    env["XDG_RUNTIME_DIR"] = str(Path(stack.tmp) / "xdg")
    with open(Path(stack.tmp) / "syshaxd-restarted.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "syshaxd", "--config", str(stack.config_path)],
                                stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip


def errors(app: RecordingConsole) -> list[str]:
    return [message for severity, _, message in app.notices if severity == "error"]


async def test_hotkeys_change_the_daemons_config_and_panels_show_its_numbers(
    make_stack: Callable[..., Any],
) -> None:
    stack = make_stack(policy="classic")
    path = socket_of(stack)
    app = console_for(path)
    # 140 columns: the wide layout, whose conductor panel keeps "total N" on its line even
    # beside the loop-lag warning that a loaded test machine brings up.
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")

        await asyncio.to_thread(chat, stack.url, 4)
        daemon = await read_state(path)
        await wait_for(pilot, lambda: app.state is not None and
                       app.state.conductor.requests_total == daemon.conductor.requests_total, "the traffic seen")  # fmt: skip
        await wait_for(pilot, lambda: app.log_panel.table.row_count >= 4, "the decisions logged")
        await pilot.pause(0.3)
        conductor = text_of(app.conductor)
        assert f"total {daemon.conductor.requests_total}" in conductor
        assert f"queue {daemon.conductor.queue_depth}/{daemon.conductor.queue_limit}" in conductor
        assert "policy classic" in conductor
        for decision, count in daemon.conductor.decisions.items():
            assert f"{decision.replace('pd_split', 'split')} {count}" in conductor
        for engine in daemon.engines:
            card = text_of(app.devices[engine.device])
            assert engine.name in card and f"/{engine.batch_limit} " in card
        shown = {app.log_panel.table.get_row_at(i)[2] for i in range(app.log_panel.table.row_count)}
        assert shown <= {"gpu", "cpu", "queue"} and shown - {"queue"}

        assert daemon.config[GPU_BATCH] is None and daemon.config["decider.max_num_seqs"] == 16
        await pilot.press("plus")
        await wait_for(pilot, lambda: "limit 17" in str(app.devices["gpu"].border_title), "GPU limit 17 shown")
        assert (await read_state(path)).config[GPU_BATCH] == 17

        await pilot.press("c", "minus")
        await wait_for(pilot, lambda: "limit 19" in str(app.devices["cpu"].border_title), "CPU limit 19 shown")
        assert (await read_state(path)).config[CPU_BATCH] == 19

        await pilot.press("p")
        await wait_for(pilot, lambda: app.state is not None and app.state.config[AUTO_PD] is True, "auto-PD on")
        assert (await read_state(path)).config[AUTO_PD] is True

        await pilot.press("P")
        await wait_for(pilot, lambda: "policy gpu-only" in text_of(app.conductor), "the next policy shown")
        assert (await read_state(path)).config[POLICY] == "gpu-only"

        await pilot.press("D")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmModal), "the drain question")
        await pilot.press("y")
        await wait_for(pilot, lambda: "DRAIN" in text_of(app.devices["cpu"]), "cpu0 shown draining")
        assert [e.draining for e in (await read_state(path)).engines if e.name == "cpu0"] == [True]
        await pilot.press("D", "y")
        await wait_for(pilot, lambda: "DRAIN" not in text_of(app.devices["cpu"]), "cpu0 back")
        assert [e.draining for e in (await read_state(path)).engines if e.name == "cpu0"] == [False]

        await pilot.press("s")
        overrides = Path(stack.tmp) / "state" / "overrides.yaml"
        await wait_for(pilot, lambda: overrides.exists(), "the overrides file written")
        assert "cpu_max_batch_size: 19" in overrides.read_text()
        await pilot.press("r")
        await wait_for(pilot, lambda: any(title == "reload" for _, title, _ in app.notices), "reload answered")
        assert errors(app) == []

        # A refusal: the daemon's validation, not the console's, decides; its reason is shown.
        await patch(path, {CPU_BATCH: 0})
        await wait_for(pilot, lambda: "limit 0" in str(app.devices["cpu"].border_title), "CPU limit 0 seen")
        await pilot.press("minus")
        await wait_for(pilot, lambda: errors(app), "the refusal")
        assert "greater than or equal to 0" in errors(app)[0]
        assert (await read_state(path)).config[CPU_BATCH] == 0
        assert not app.readonly


async def test_a_daemon_restart_needs_no_key(make_stack: Callable[..., Any]) -> None:
    stack = make_stack(policy="classic")
    path = socket_of(stack)
    app = console_for(path)
    restarted: subprocess.Popen[bytes] | None = None
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.connected, "connected")

            stack.daemon.send_signal(signal.SIGTERM)
            await asyncio.to_thread(stack.daemon.wait, 20)
            await wait_for(pilot, lambda: not app.connected, "the loss noticed")
            await wait_for(pilot, lambda: "DISCONNECTED — retrying" in text_of(app.status_bar), "the banner")
            assert app.main_screen.has_class("-disconnected")
            assert "gpu0" in text_of(app.devices["gpu"])  # the last data stays on screen
            assert app.check_action("toggle_pd", ()) is None

            restarted = await asyncio.to_thread(start_daemon, stack)
            await wait_for(pilot, lambda: app.connected, "reconnected by itself")
            await wait_for(pilot, lambda: "connected syshaxd" in text_of(app.status_bar), "the status line")
            assert not app.main_screen.has_class("-disconnected")
            await pilot.press("p")
            await wait_for(pilot, lambda: app.state is not None and app.state.config[AUTO_PD] is True, "writes work")
            assert (await read_state(path)).config[AUTO_PD] is True
    finally:
        if restarted is not None:
            await asyncio.to_thread(stop_process, restarted)
