"""Free loopback ports for the demo's servers, the benchmarks and the tests."""

from __future__ import annotations

import socket
import time

#: Ports this process handed out, and when: callers pick several ports before starting anything on them.
_HANDED_OUT: dict[int, float] = {}
_HOLD_S = 120.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and not one this process handed out lately.

    Binding port 0 twice in a row may give the same port twice (the kernel only promises it is free
    *now*); a caller that picks an engine's port and the daemon's port before starting either would
    then start both on one port. Ports handed out in the last two minutes are skipped.
    """
    now = time.monotonic()
    for port, at in list(_HANDED_OUT.items()):
        if now - at > _HOLD_S:
            del _HANDED_OUT[port]
    for _ in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT[port] = now
            return port
    raise OSError("no free loopback port that was not handed out already")
