"""``syshax demo`` end to end: real simulator, daemon, load and (in a pseudo-terminal) console.

Each test runs the real command with ``TMPDIR`` pointing into a fresh short directory
under /tmp (removed afterwards), records every process the demo starts while it runs, and checks afterwards
that none is left and that its runtime directory (config, logs, control socket) is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from syshaxd.schema import DecisionModel, StateModel

SYSHAX = [sys.executable, "-c", "import sys; from syshaxd.cli import main; sys.exit(main())"]
#: Fast enough that requests finish in a second or two, slow enough for two busy cores.
SPEED = "10"
LOAD = "0.3"

pytestmark = pytest.mark.timeout(240)


class DemoRun:
    """A running ``syshax demo`` and every process it started."""

    def __init__(self, proc: subprocess.Popen[bytes], tmpdir: Path, output: Callable[[], str]) -> None:
        self.proc = proc
        self.tmpdir = tmpdir
        self.output = output
        self.seen: set[psutil.Process] = set()

    def watch(self) -> None:
        """Remember the demo's descendants (called while it runs)."""
        try:
            self.seen.update(psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    def wait_for(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``check`` (watching processes meanwhile) until it returns something true."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.watch()
            if self.proc.poll() is not None:
                raise AssertionError(f"demo exited ({self.proc.returncode}) before {what}:\n{self.output()[-3000:]}")
            result = check()
            if result:
                return result
            time.sleep(0.3)
        raise AssertionError(f"{what} did not happen within {timeout}s:\n{self.output()[-3000:]}")

    def socket(self) -> Path | None:
        """The demo's control socket, once it exists."""
        found = list(self.tmpdir.glob("syshax-demo-*/run/control.sock"))
        return found[0] if found else None

    def leftovers(self) -> list[str]:
        """Processes still alive and files still in TMPDIR after the demo ended."""
        alive = [f"{p.pid} {_cmdline(p)[:120]}" for p in self.seen if _alive(p)]
        files = [str(p) for p in self.tmpdir.rglob("*")]
        return alive + files


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _env(tmpdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
    env.update(TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1", COLUMNS="160")
    return env


def _state(sock: Path) -> StateModel | None:
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://d", timeout=5) as c:
            return StateModel.model_validate_json(c.get("/v1/state").content)
    except (httpx.HTTPError, ValueError):
        return None


def _patch(sock: Path, body: dict[str, Any]) -> None:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://d", timeout=5) as c:
        c.patch("/v1/config", json=body).raise_for_status()


def _decisions_after(sock: Path, since: float) -> list[DecisionModel]:
    state = _state(sock)
    return [d for d in state.recent_decisions if d.time > since] if state else []


def _api_url(sock: Path) -> str:
    config = yaml.safe_load((sock.parent.parent / "config.yaml").read_text())
    return f"http://127.0.0.1:{config['services']['conductor']['port']}"


def _finished(api: str, device: str, mode: str) -> float:
    """Requests the conductor's /metrics count as answered on ``device`` in ``mode``."""
    try:
        text = httpx.get(f"{api}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        s.value for f in text_string_to_metric_families(text) for s in f.samples
        if s.name == "syshax_requests_total" and s.labels.get("device") == device
        and s.labels.get("mode") == mode and s.labels.get("outcome") == "ok"
    )


def _kill_leftovers(run: DemoRun) -> None:
    for p in run.seen:
        if _alive(p):
            p.kill()
    if run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait(10)


@pytest.fixture
def headless(tmp_path: Path, short_tmp: Path) -> Iterator[Callable[..., DemoRun]]:
    """Start ``syshax demo --headless ARGS`` with output to a file; kills leftovers at the end."""
    runs: list[DemoRun] = []

    def start(*args: str) -> DemoRun:
        tmpdir = short_tmp / f"tmp{len(runs)}"  # so the control socket path fits, wherever pytest's tmp is
        tmpdir.mkdir()
        log = tmp_path / f"demo{len(runs)}.out"
        with open(log, "wb") as out:
            proc = subprocess.Popen([*SYSHAX, "demo", "--headless", *args], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=_env(tmpdir))
        run = DemoRun(proc, tmpdir, lambda: log.read_text(errors="replace"))
        runs.append(run)
        return run

    yield start
    for run in runs:
        _kill_leftovers(run)


def test_headless_demo_uses_both_devices_splits_and_reacts_to_runtime_changes(
    headless: Callable[..., DemoRun], tmp_path: Path
) -> None:
    summary_path = tmp_path / "summary.json"
    run = headless("--speed", SPEED, "--load", LOAD, "--interval", "1", "--trace", "sample",
                   "--duration", "900", "--json-summary", str(summary_path))  # the test stops it sooner
    sock = run.wait_for(run.socket, 60, "the control socket appeared")
    api = _api_url(sock)
    run.wait_for(lambda: _finished(api, "cpu", "pd_split") > 0 and _finished(api, "gpu", "whole") > 0, 120,
                 "requests finished on the GPU and split between GPU and CPU")

    # Operator turns auto-PD offload off: the next CPU decisions are whole requests on the CPU.
    _patch(sock, {"decider.auto_pd_offload": False})
    changed = time.time()  # the change is in force once the PATCH has answered
    run.wait_for(lambda: any(d.device == "cpu" and d.mode == "whole" for d in _decisions_after(sock, changed)),
                 60, "a cpu/whole decision after auto_pd_offload=false")

    # CPU batch limit 0: the CPU gets nothing new, whatever the GPU's load.
    _patch(sock, {"decider.cpu_max_batch_size": 0})
    closed = time.time()
    later = run.wait_for(lambda: [d for d in _decisions_after(sock, closed) if d.device is not None][:10]
                         if len(_decisions_after(sock, closed)) >= 10 else None,
                         120, "ten decisions after cpu_max_batch_size=0")
    assert all(d.device == "gpu" for d in later), [(d.device, d.reason) for d in later]

    run.proc.send_signal(signal.SIGINT)
    assert run.proc.wait(60) == 0, run.output()[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["done_gpu"] > 0 and summary["done_cpu"] > 0, summary
    assert summary["splits"] >= 1, summary
    assert summary["client"]["lost"] == 0, summary["client"]
    out = run.output()
    assert "done: " in out and "gpu0 run" in out  # status lines were printed
    assert "cpu/pd_split" in out and "client's view" in out  # and the summary table
    assert run.leftovers() == []


def test_sigterm_while_starting_leaves_nothing(headless: Callable[..., DemoRun]) -> None:
    run = headless("--speed", "20")
    run.wait_for(lambda: list(run.tmpdir.glob("syshax-demo-*/logs/sim.log")), 60, "the simulator started")
    run.proc.send_signal(signal.SIGTERM)
    run.proc.wait(60)
    assert "stopped while starting (SIGTERM)" in run.output() or "stopping (SIGTERM)" in run.output()
    assert run.leftovers() == []


def _pty_demo(tmpdir: Path, duration: str = "120") -> tuple[DemoRun, int, list[bytes]]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    env = {**_env(tmpdir), "TERM": "xterm-256color"}
    proc = subprocess.Popen([*SYSHAX, "demo", "--speed", "20", "--load", "0.1", "--duration", duration],
                            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
                            preexec_fn=controlling_terminal)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # a full pty buffer would block the console
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    threading.Thread(target=drain, daemon=True).start()
    return DemoRun(proc, tmpdir, lambda: b"".join(chunks).decode(errors="replace")), master, chunks


@pytest.mark.parametrize("key", [b"q", b"\x03"], ids=["q", "ctrl-c"])
def test_console_key_stops_everything(short_tmp: Path, key: bytes) -> None:
    tmpdir = short_tmp / "tmp"
    tmpdir.mkdir()
    run, master, _ = _pty_demo(tmpdir)
    try:
        sock = run.wait_for(run.socket, 60, "the control socket appeared")
        run.wait_for(lambda: any("console.cli" in _cmdline(p) for p in run.seen), 30, "the console started")
        run.wait_for(lambda: (_state(sock) or StateModel(version="", uptime=0, time=0)).conductor.requests_total > 0,
                     60, "requests flowed")
        # The key goes in once the console has drawn its footer (so it reads keys itself).
        run.wait_for(lambda: "q quit" in _screen(run.output()), 60, "the console drew its footer")
        os.write(master, key)
        assert run.proc.wait(60) == 0, run.output()[-3000:]
    finally:
        _kill_leftovers(run)
        os.close(master)
    assert "stopping (console closed)" in _screen(run.output())
    assert run.leftovers() == []
    _assert_terminal_restored(run.output())


def test_duration_ending_under_the_console_restores_the_terminal(short_tmp: Path) -> None:
    tmpdir = short_tmp / "tmp"
    tmpdir.mkdir()
    # Long enough for the console to start and draw on a busy machine before the duration ends.
    run, master, _ = _pty_demo(tmpdir, duration="30")
    try:
        run.wait_for(lambda: "q quit" in _screen(run.output()), 60, "the console drew its footer")
        while run.proc.poll() is None:
            run.watch()
            time.sleep(0.2)
        assert run.proc.returncode == 0, run.output()[-3000:]
    finally:
        _kill_leftovers(run)
        os.close(master)
    assert "stopping (--duration 30s reached)" in _screen(run.output())
    assert run.leftovers() == []
    _assert_terminal_restored(run.output())


def _assert_terminal_restored(raw: str) -> None:
    """The console's alternate screen and mouse reporting were switched off again."""
    entered, left = raw.rfind("\x1b[?1049h"), raw.rfind("\x1b[?1049l")
    assert entered >= 0 and left > entered, "the alternate screen was never left"
    assert raw.rfind("\x1b[?1000l") > raw.rfind("\x1b[?1000h"), "mouse reporting left on"


def _screen(raw: str) -> str:
    """Terminal output without escape sequences."""
    return re.sub(r"\x1b\[[0-9;?<>=]*[a-zA-Z~]|\x1b[()][AB0-9]|\x1b\][^\x07]*\x07|\x1b[=>]", "", raw)


@pytest.mark.llama
def test_demo_on_two_real_llama_servers(headless: Callable[..., DemoRun], tmp_path: Path) -> None:
    from tests.plugins.llama import resolve_build

    build = resolve_build()  # fails with "run make engines" when the binary is missing
    summary_path = tmp_path / "summary.json"
    run = headless("--engines", "llama", "--llama-server", str(build.binary), "--llama-model", str(build.model),
                   "--load", "0.5", "--interval", "2", "--trace", "sample", "--duration", "120",
                   "--json-summary", str(summary_path))
    sock = run.wait_for(run.socket, 60, "the control socket appeared")
    api = _api_url(sock)
    # Real KV caches move between the servers (llamacpp-slots) and both roles answer.
    run.wait_for(lambda: _finished(api, "cpu", "pd_split") >= 2 and _finished(api, "gpu", "whole") >= 2, 90,
                 "split and whole requests answered by the llama-servers")
    run.proc.send_signal(signal.SIGINT)
    assert run.proc.wait(60) == 0, run.output()[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["handoff"] == "llamacpp-slots" and summary["splits"] >= 2, summary
    assert summary["client"]["lost"] == 0 and summary["client"]["errors"] == 0, summary["client"]
    assert "two real llama-servers" in run.output()
    assert run.leftovers() == []
