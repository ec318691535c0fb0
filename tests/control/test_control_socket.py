"""The control socket: safe creation, single instance, stale sockets, who may read and write."""

from __future__ import annotations

import asyncio
import grp
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from syshaxd.control import listen as cs
from syshaxd.control.listen import AlreadyRunning, ControlSocketError, create_control_socket
from tests.control.conftest import NOBODY, ControlHarness, needs_root, run_as_nobody

#: A daemon's socket in a process of its own, held until its stdin closes.
HOLD = """
import sys
from pathlib import Path
from syshaxd.control.listen import create_control_socket
control = create_control_socket(Path(sys.argv[1]), "nogroup")
print("ready", flush=True)
sys.stdin.read()
control.close()
"""
#: A second daemon in a process of its own: prints why it may not start, or "started".
ATTEMPT = """
import sys
from pathlib import Path
from syshaxd.control.listen import AlreadyRunning, create_control_socket
try:
    create_control_socket(Path(sys.argv[1]), "nogroup").close()
except AlreadyRunning as exc:
    print(exc)
else:
    print("started")
"""


@contextmanager
def held_by_another_process(path: Path) -> Iterator[subprocess.Popen[str]]:
    """The control socket at ``path`` created and held by a child process."""
    with subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "ready"
            yield child
        finally:
            child.stdin.close()  # the child closes its socket and exits
            child.wait(timeout=30)


def second_daemon_says(path: Path) -> str:
    """What a second daemon, started in another process, says about the socket at ``path``."""
    out = subprocess.run([sys.executable, "-c", ATTEMPT, str(path)], capture_output=True, text=True,
                         timeout=30, check=True)
    return out.stdout.strip()


def test_socket_is_0660_for_the_group_and_never_wider(public_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = public_dir / "control.sock"
    modes_at_chown: list[int] = []
    real_chown = os.chown

    def spy_chown(target: str | Path, uid: int, gid: int) -> None:
        modes_at_chown.append(stat.S_IMODE(os.stat(target).st_mode))
        real_chown(target, uid, gid)

    monkeypatch.setattr(cs.os, "chown", spy_chown)
    old_umask = os.umask(0)  # even with no umask the name never appears world-accessible
    try:
        control = create_control_socket(path, "nogroup")
    finally:
        os.umask(old_umask)
    try:
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_gid == grp.getgrnam("nogroup").gr_gid
        assert modes_at_chown == [0o600]  # owner-only between bind() and chown/chmod
    finally:
        control.close()
    assert not path.exists()
    assert not path.with_name("control.sock.lock").exists()


def test_missing_group_falls_back_to_the_daemons_group(public_dir: Path) -> None:
    control = create_control_socket(public_dir / "control.sock", "no-such-group-syshax")
    try:
        assert os.stat(control.path).st_gid == os.getegid()
        assert control.gid == os.getegid()
    finally:
        control.close()


def test_second_instance_is_refused_naming_the_first_ones_pid(public_dir: Path) -> None:
    path = public_dir / "control.sock"
    with held_by_another_process(path) as first:
        assert first.pid != os.getpid()
        with pytest.raises(AlreadyRunning, match=rf"\(pid {first.pid}\)"):
            create_control_socket(path, "nogroup")
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))  # the first one still listens
        probe.close()
    assert not path.exists()  # and cleaned up after itself: our refusal took nothing of its


def test_stale_socket_from_a_dead_daemon_is_replaced(public_dir: Path) -> None:
    path = public_dir / "control.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: what a killed daemon leaves behind
    os.chmod(path, 0o604)
    control = create_control_socket(path, "nogroup")
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))
        probe.close()
    finally:
        control.close()


def test_a_live_listener_without_the_lock_is_not_deleted(public_dir: Path) -> None:
    path = public_dir / "control.sock"
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    other.listen(1)
    try:
        with pytest.raises(AlreadyRunning, match="listening"):
            create_control_socket(path, "nogroup")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))  # still reaches the live listener
        accepted, _ = other.accept()
        accepted.close()
        probe.close()
    finally:
        other.close()
        path.unlink()


def test_a_regular_file_in_the_way_is_left_alone(public_dir: Path) -> None:
    path = public_dir / "control.sock"
    path.write_text("not a socket")
    with pytest.raises(ControlSocketError, match="not a socket"):
        create_control_socket(path, "nogroup")
    assert path.read_text() == "not a socket"
    assert not path.with_name("control.sock.lock").exists()


@needs_root
async def test_group_member_may_read_but_not_write(control_api: ControlHarness) -> None:
    status, body = await asyncio.to_thread(run_as_nobody, control_api.socket_path, "GET", "/v1/state")
    assert status == 200, body
    status, body = await asyncio.to_thread(
        run_as_nobody, control_api.socket_path, "PATCH", "/v1/config", '{"decider.cpu_max_batch_size": 2}'
    )
    assert status == 403
    assert "admin_group" in body and f"uid {NOBODY}" in body
    assert control_api.runtime.config.decider.cpu_max_batch_size == 8
    status, body = await asyncio.to_thread(run_as_nobody, control_api.socket_path, "POST", "/v1/reload")
    assert status == 403


@needs_root
@pytest.mark.parametrize("control_options", [{"group": "nogroup", "admin_group": "nogroup"}])
async def test_admin_group_member_may_write(control_api: ControlHarness) -> None:
    status, body = await asyncio.to_thread(
        run_as_nobody, control_api.socket_path, "PATCH", "/v1/config", '{"decider.cpu_max_batch_size": 2}'
    )
    assert status == 200, body
    assert control_api.runtime.config.decider.cpu_max_batch_size == 2


@needs_root
@pytest.mark.parametrize("control_options", [{"group": "root", "admin_group": None}])
async def test_non_member_cannot_even_connect(control_api: ControlHarness) -> None:
    status, body = await asyncio.to_thread(run_as_nobody, control_api.socket_path, "GET", "/v1/state")
    assert status == 0
    assert "Permission denied" in body


def test_remade_socket_owns_the_path_and_closing_the_old_one_leaves_it(public_dir: Path) -> None:
    path = public_dir / "control.sock"
    first = create_control_socket(path, "nogroup")
    fresh = None
    try:
        assert not first.deleted() and not first.replaced()
        path.unlink()
        assert first.deleted()
        fresh = first.remake()
        assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o660
        assert not fresh.deleted() and not fresh.replaced()
        assert first.replaced()  # the path is the new socket's now
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))  # the new socket listens
        with pytest.raises(AlreadyRunning):  # the lock was kept
            create_control_socket(path, "nogroup")
        first.close()  # the old one's close must not take the new socket's file
        assert path.exists()
    finally:
        if fresh is not None:
            fresh.close()
        first.close()
    assert not path.exists()
    assert not path.with_name("control.sock.lock").exists()


def test_remake_after_the_directory_went_takes_the_lock_again(public_dir: Path) -> None:
    run = public_dir / "run"
    path = run / "control.sock"
    first = create_control_socket(path, "nogroup")
    try:
        for entry in run.iterdir():
            entry.unlink()
        run.rmdir()
        fresh = first.remake()
        try:
            # The lock is ours again: another process trying to start is told this one's pid.
            assert f"(pid {os.getpid()})" in second_daemon_says(path)
        finally:
            fresh.close()
    finally:
        first.close()
    assert not path.exists() and not path.with_name("control.sock.lock").exists()


def test_remake_when_another_daemon_took_the_lock_meanwhile_is_refused(public_dir: Path) -> None:
    path = public_dir / "control.sock"
    first = create_control_socket(path, "nogroup")
    try:
        path.unlink()
        path.with_name("control.sock.lock").unlink()
        other = create_control_socket(path, "nogroup")  # the path was free: someone took it
        try:
            with pytest.raises(AlreadyRunning):
                first.remake()
            assert first.replaced() and not first.deleted()
            first.close()  # and the first daemon's stop leaves the other's socket and lock alone
            assert path.exists() and path.with_name("control.sock.lock").exists()
            with pytest.raises(AlreadyRunning):
                create_control_socket(path, "nogroup")
        finally:
            other.close()
    finally:
        first.close()
