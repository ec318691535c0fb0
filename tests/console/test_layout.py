"""Layout snapshots: the recorded state at 80x24 and 160x48, compared as plain text.

The text of the screen is compared with ``snapshots/*.txt``; run with
``SYSHAX_UPDATE_SNAPSHOTS=1`` to rewrite them after an intended layout change (and look at
the SVG written beside the test's tmp_path before committing).
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from console.app import ConsoleApp
from tests.console.conftest import Control, console_for, wait_for

SNAPSHOTS = Path(__file__).parent / "snapshots"


def screen_text(app: ConsoleApp) -> str:
    """What the terminal shows, as text (every cell, no colours)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True,
                      color_system=None, legacy_windows=False)  # fmt: skip
    # Textual's own screenshots render the compositor the same way.
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    console.print(update)
    return console.export_text()


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Decision times printed in UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("width", "height"), [(80, 24), (160, 48)])
async def test_layout_of_the_recorded_state(control: Control, utc: Any, tmp_path: Path,
                                            width: int, height: int) -> None:  # fmt: skip
    app = console_for(control.path)
    async with app.run_test(size=(width, height)) as pilot:
        await wait_for(pilot, lambda: app.connected and app.state is not None, "connected")
        await pilot.pause(0.3)
        await pilot.wait_for_scheduled_animations()
        text = screen_text(app)
        app.save_screenshot(f"console-{width}x{height}.svg", str(tmp_path))
    lines = text.rstrip("\n").split("\n")
    assert len(lines) == height and all(len(line) <= width for line in lines)
    for word in ("gpu0", "gpu1", "cpu0", "cpu1", "STALE", "DRAIN", "N0", "N3", "bound 0-39",
                 "queue", "decisions", "? help", "q quit"):  # fmt: skip
        assert word in text, f"{word!r} is not on the {width}x{height} screen"
    golden = SNAPSHOTS / f"console-{width}x{height}.txt"
    svg = tmp_path / f"console-{width}x{height}.svg"
    if os.environ.get("SYSHAX_UPDATE_SNAPSHOTS"):
        SNAPSHOTS.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    if not golden.exists():
        pytest.fail(f"no snapshot {golden} to compare with: run with SYSHAX_UPDATE_SNAPSHOTS=1 to write it, "
                    f"look at {svg}, and commit it")  # fmt: skip
    assert text == golden.read_text(encoding="utf-8"), f"layout changed: compare with {golden} (screen: {svg})"
