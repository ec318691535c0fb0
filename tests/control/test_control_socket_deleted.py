"""The control socket deleted under a running daemon: the OpenAI API keeps serving, the
daemon makes the socket again (the console finds it), and still stops cleanly."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable

import httpx

from tests.plugins.stack import Stack
from tests.probe import (
    Usage,
    assert_no_traceback,
    chat,
    control_socket,
    drained,
    health,
    state,
    wait_until,
)


def _answers(stack: Stack) -> bool:
    # A plain connect first: httpx leaves its socket unclosed when the path is missing.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(control_socket(stack)))
        except OSError:
            return False
    return bool(state(stack)["engines"])


def _second_daemon_refuses(stack: Stack) -> None:
    # The lock is held: a second daemon with the same control.socket refuses to start
    # rather than taking the socket path over from a live daemon.
    second = subprocess.run([sys.executable, "-m", "syshaxd", "--config", str(stack.config_path)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "XDG_RUNTIME_DIR": str(stack.tmp / "xdg")})
    assert second.returncode != 0
    assert "already running" in second.stderr, second.stderr


def test_control_socket_deleted_the_api_keeps_serving_and_the_socket_comes_back(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(policy="classic")
    sock = control_socket(stack)
    assert state(stack)["engines"]
    assert chat(stack, stream=True).complete
    baseline = Usage.of(stack)
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://syshaxd") as before:
        before.get("/v1/state").raise_for_status()  # a client connected before the deletion...
        sock.unlink()
        for stream in (True, False, True):
            assert chat(stack, stream=stream).complete
        assert health(stack).json()["status"] == "ok"
        assert stack.daemon.poll() is None
        assert before.get("/v1/state").status_code == 200  # ...keeps its connection

    # The daemon notices and makes the socket again, with the same mode.
    assert wait_until(lambda: _answers(stack), timeout=30), stack.log_text()[-2000:]
    assert stat.S_IMODE(sock.stat().st_mode) == 0o660
    assert "was deleted under the daemon; made it again" in stack.log_text()
    assert wait_until(lambda: drained(stack, baseline))
    _second_daemon_refuses(stack)

    # The whole directory, lock file included: both come back, and the lock still keeps a
    # second daemon out.
    shutil.rmtree(sock.parent)
    assert chat(stack, stream=False).complete
    assert wait_until(lambda: _answers(stack), timeout=30), stack.log_text()[-2000:]
    assert sock.with_name(sock.name + ".lock").exists()
    _second_daemon_refuses(stack)

    assert chat(stack, stream=False).complete
    stack.daemon.send_signal(signal.SIGTERM)
    assert stack.daemon.wait(timeout=30) == 0
    assert_no_traceback(stack)
    assert not sock.exists()
    assert not list(sock.parent.glob("*.lock")), "the lock file is left behind"
