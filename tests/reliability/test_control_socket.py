"""The control socket deleted under a running daemon: the OpenAI API keeps serving, and the
daemon still stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

from tests.plugins.stack import Stack
from tests.reliability._probe import (
    Usage,
    assert_no_traceback,
    chat,
    control_socket,
    drained,
    health,
    state,
    wait_until,
)


def test_control_socket_deleted_the_api_keeps_serving(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic")
    assert state(stack)["engines"]
    assert chat(stack, stream=True).complete
    baseline = Usage.of(stack)
    control_socket(stack).unlink()
    for stream in (True, False, True):
        assert chat(stack, stream=stream).complete
    assert health(stack).json()["status"] == "ok"
    assert not control_socket(stack).exists()
    assert stack.daemon.poll() is None
    assert wait_until(lambda: drained(stack, baseline))
    # The lock is still held: a second daemon with the same control.socket refuses to start
    # rather than taking the socket path over from a live daemon.
    second = subprocess.run([sys.executable, "-m", "syshaxd.main", "--config", str(stack.config_path)],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, "XDG_RUNTIME_DIR": str(stack.tmp / "xdg")})
    assert second.returncode != 0
    assert "already running" in second.stderr, second.stderr
    assert chat(stack, stream=False).complete
    stack.daemon.send_signal(signal.SIGTERM)
    assert stack.daemon.wait(timeout=30) == 0
    assert_no_traceback(stack)
    assert not control_socket(stack).exists()
    assert not list(control_socket(stack).parent.glob("*.lock")), "the lock file is left behind"
