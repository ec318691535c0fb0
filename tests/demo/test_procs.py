"""The demo's supervisor leaves no process behind: groups, stubborn children, a killed parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from demo.procs import Interrupted, StartError, StopFlag, Supervisor, wait_until

# A child that starts a grandchild in its own process group, then waits.
PARENT_OF_SLEEPER = textwrap.dedent("""
    import subprocess, sys, time
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(p.pid, flush=True)
    time.sleep(120)
""")
IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"


def _gone(pids: list[int]) -> bool:
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return not alive


def _first_line(path: Path) -> str:
    wait_until(lambda: path.exists() and path.read_text().strip() != "", 20, f"{path} has a line")
    return path.read_text().split()[0]


def test_stop_all_ends_children_and_their_grandchildren(tmp_path: Path) -> None:
    sup = Supervisor(grace=5)
    try:
        child = sup.start("parent", [sys.executable, "-c", PARENT_OF_SLEEPER], log_path=tmp_path / "out.log")
        grandchild = int(_first_line(tmp_path / "out.log"))
        assert psutil.pid_exists(grandchild)
    finally:
        sup.stop_all()
    wait_until(lambda: _gone([child.pid, grandchild]), 10, "the group is gone")
    assert not child.alive()
    sup.stop_all()  # a second call is harmless


def test_a_child_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    sup = Supervisor(grace=0.5)
    child = sup.start("stubborn", [sys.executable, "-c", IGNORES_SIGTERM], log_path=tmp_path / "s.log")
    _first_line(tmp_path / "s.log")
    code = sup.stop(child)
    assert code == -signal.SIGKILL
    sup.stop_all()
    with pytest.raises(RuntimeError, match="already stopped"):
        sup.start("late", [sys.executable, "-c", "pass"])


def test_children_die_with_a_killed_demo(tmp_path: Path) -> None:
    # The demo process itself is SIGKILLed (no atexit, no handlers): the kernel's
    # parent-death signal must still end its children.
    script = textwrap.dedent("""
        import sys, time
        from demo.procs import Supervisor
        sup = Supervisor()
        child = sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"])
        print(child.pid, flush=True)
        time.sleep(120)
    """)
    out = tmp_path / "demo.out"
    child_pid = 0
    with open(out, "wb") as handle:
        demo = subprocess.Popen([sys.executable, "-c", script], stdout=handle, cwd=os.getcwd())
    try:
        child_pid = int(_first_line(out))
        assert psutil.pid_exists(child_pid)
        demo.send_signal(signal.SIGKILL)
        demo.wait(timeout=10)
        wait_until(lambda: _gone([child_pid]), 10, "the orphaned child is gone")
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        if child_pid and not _gone([child_pid]):
            os.kill(child_pid, signal.SIGKILL)


def test_start_error_carries_the_log_tail(tmp_path: Path) -> None:
    sup = Supervisor(grace=1)
    try:
        child = sup.start("failing", [sys.executable, "-c", "print('boom: port in use'); raise SystemExit(3)"],
                          log_path=tmp_path / "f.log")
        with pytest.raises(StartError, match=r"(?s)failing exited with code 3.*boom: port in use"):
            wait_until(lambda: False, 20, "it answered", child)
    finally:
        sup.stop_all()


def test_a_signal_only_sets_the_flag_and_the_next_wait_stops() -> None:
    flag = StopFlag()
    previous = flag.install()
    try:
        os.kill(os.getpid(), signal.SIGHUP)  # would end the process with the default handler
        assert flag.reason == "SIGHUP"
        with pytest.raises(Interrupted, match="SIGHUP"):
            wait_until(lambda: False, 20, "never", stop=flag)
        flag.set("later")  # the first reason is kept
        assert flag.reason == "SIGHUP"
    finally:
        StopFlag.restore(previous)
    assert signal.getsignal(signal.SIGHUP) == previous[signal.SIGHUP]
