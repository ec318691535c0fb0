"""sd_notify, watchdog interval and socket activation, with real sockets."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from syshaxd.service.sdnotify import Notifier, listen_fds, watchdog_interval
from tests.plugins.ports import free_port


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    yield str(path), sock
    sock.close()


def test_notifier_sends_each_message_as_one_datagram(notify_socket: tuple[str, socket.socket]) -> None:
    address, sock = notify_socket
    env = {"NOTIFY_SOCKET": address}
    notifier = Notifier.from_env(env)
    assert "NOTIFY_SOCKET" not in env  # children must not inherit it
    assert notifier.ready("serving")
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving"
    notifier.reloading()
    fields = sock.recv(4096).decode().split("\n")
    assert fields[0] == "RELOADING=1"
    assert fields[1].startswith("MONOTONIC_USEC=") and int(fields[1].split("=")[1]) > 0
    notifier.watchdog()
    notifier.status("two\nlines")
    notifier.stopping()
    assert [sock.recv(4096) for _ in range(3)] == [b"WATCHDOG=1", b"STATUS=two lines", b"STOPPING=1"]
    notifier.close()


def test_abstract_notify_socket() -> None:
    name = f"syshax-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        notifier = Notifier(f"@{name}")
        assert notifier.enabled
        notifier.ready()
        assert sock.recv(100) == b"READY=1"
        notifier.close()
    finally:
        sock.close()


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert notifier.ready() is False


def test_unreachable_notify_socket_is_not_fatal(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "missing.sock"))
    assert not notifier.enabled
    assert notifier.watchdog() is False


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "10000000"}, 5.0),
        ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": str(os.getpid())}, 5.0),
        ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(env) == expected


def test_listen_fds_ignores_another_process_and_unsets_the_variables() -> None:
    env = {"LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "api"}
    assert listen_fds(env) == []
    assert env == {}


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="needs systemd-socket-activate")
def test_socket_activation_with_systemd_socket_activate() -> None:
    port = free_port()
    probe = (
        "from syshaxd.service.sdnotify import listen_fds; import os; "
        "socks = listen_fds(); "
        "print(len(socks), socks[0].getsockname()[1], 'LISTEN_FDS' in os.environ)"
    )
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", f"127.0.0.1:{port}", sys.executable, "-c", probe],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # systemd-socket-activate starts the program on the first connection.
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out.split() == ["1", str(port), "False"]
