"""``syshax-console`` as a command: --once prints a snapshot; mistakes are messages, not tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.plugins.ports import stop_process, wait_until

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = [sys.executable, "-c", "import sys; from console.cli import main; sys.exit(main())"]


def run_console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "100", **(env or {})}
    full_env.pop("SYSHAX_CONFIG", None)
    return subprocess.run([*CONSOLE, *args], capture_output=True, text=True, cwd=ROOT, env=full_env, timeout=60)


def _decided(path: Path) -> bool:
    """The stand-in daemon answers on its socket and has recorded a decision."""
    if not path.exists():
        return False
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://syshaxd", timeout=10) as client:
        try:
            return bool(client.get("/v1/state").json()["recent_decisions"])
        except httpx.HTTPError:
            return False


@pytest.fixture
def daemon_socket(short_tmp: Path) -> Iterator[Path]:
    """The stand-in daemon as a process (generated states, a few decisions a second)."""
    path = short_tmp / "control.sock"
    log = short_tmp / "fakedaemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.console.fakedaemon", "--socket", str(path),
                                 "--cores", "64", "--engines", "3", "--decisions", "20"],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert wait_until(lambda: proc.poll() is not None or _decided(path)), "the stand-in daemon did not start"
        assert proc.poll() is None, log.read_text()
        yield path
    finally:
        stop_process(proc, grace=10)


def test_once_prints_every_panel_without_a_terminal(daemon_socket: Path) -> None:
    done = run_console("--once", "--socket", str(daemon_socket), env={"NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for word in ("syshaxd 0.1.0", "GPU · limit 16", "CPU · limit 20", "gpu0", "gpu1", "cpu0", "● UP",
                 "NUMA · 64 cores", "bound 0-15", "conductor", "queue", "recent decisions", "req-"):  # fmt: skip
        assert word in out, word
    assert "\x1b[" not in out  # piped and NO_COLOR: plain text
    assert all(len(line) <= 100 for line in out.splitlines())


def test_once_without_a_daemon_says_so(short_tmp: Path) -> None:
    missing = short_tmp / "none.sock"
    done = run_console("--once", "--socket", str(missing))
    assert done.returncode == 1
    assert f"syshaxd is not running: the socket {missing} does not exist" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--refresh", "100"], "--refresh must be between 0.5 and 30"),
        (["--max-log", "1"], "--max-log must be between 10 and 100000"),
        (["--refresh", "fast"], "invalid float value"),
        (["--config", "/nonexistent/config.yaml"], "config file not found"),
        (["--keymap", "/nonexistent/keys.yaml", "--socket", "/tmp/x.sock"], "keymap file not found"),
    ],
)
def test_bad_options_are_messages(args: list[str], message: str) -> None:
    done = run_console(*args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_keymap_with_an_unknown_id_names_it(short_tmp: Path) -> None:
    keys = short_tmp / "keys.yaml"
    keys.write_text("drian: d\n")
    done = run_console("--keymap", str(keys), "--socket", str(short_tmp / "x.sock"))
    assert done.returncode == 2
    assert "unknown binding id 'drian' (did you mean 'drain'?)" in done.stderr


def test_screenshot_runs_without_a_terminal_and_saves_an_svg(daemon_socket: Path, short_tmp: Path) -> None:
    svg = short_tmp / "console.svg"
    done = run_console("--socket", str(daemon_socket), "--screenshot", str(svg), "--after", "1.5", "--size", "120x40")
    assert done.returncode == 0, done.stderr
    text = svg.read_text()
    assert text.startswith("<svg") and "gpu1" in text and "cpu0" in text


@pytest.mark.parametrize("size", ["100", "10x10", "wide"])
def test_a_bad_screenshot_size_is_a_message(size: str, short_tmp: Path) -> None:
    done = run_console("--screenshot", str(short_tmp / "x.svg"), "--size", size)
    assert done.returncode == 2 and "--size must look like 120x40" in done.stderr
