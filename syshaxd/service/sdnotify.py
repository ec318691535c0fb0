"""The systemd service protocol with the standard library: sd_notify, watchdog, socket activation.

Outside systemd (no ``$NOTIFY_SOCKET``, no ``$LISTEN_FDS``) everything here is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping, MutableMapping

log = logging.getLogger("syshaxd.systemd")

#: The first file descriptor systemd passes (sd_listen_fds(3): SD_LISTEN_FDS_START).
LISTEN_FDS_START = 3


class Notifier:
    """Sends ``sd_notify`` datagrams to ``$NOTIFY_SOCKET`` (no-op when it is unset)."""

    def __init__(self, address: str | None) -> None:
        """Connect to a notify socket path (``@name`` = abstract namespace), or none."""
        self.address = address
        self._sock: socket.socket | None = None
        if address:
            target = "\0" + address[1:] if address.startswith("@") else address
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            try:
                sock.connect(target)
            except OSError as exc:
                log.warning("cannot reach NOTIFY_SOCKET %s: %s", address, exc)
                sock.close()
            else:
                # A full receive queue must never stall the event loop.
                sock.setblocking(False)
                self._sock = sock

    @classmethod
    def from_env(cls, env: MutableMapping[str, str] | None = None) -> Notifier:
        """A notifier for ``$NOTIFY_SOCKET``, removed from the environment so children don't inherit it."""
        env = os.environ if env is None else env
        return cls(env.pop("NOTIFY_SOCKET", None) or None)

    @property
    def enabled(self) -> bool:
        """Whether a notify socket is connected."""
        return self._sock is not None

    def notify(self, *fields: str) -> bool:
        """Send ``KEY=VALUE`` fields in one datagram; False if not sent."""
        if self._sock is None:
            return False
        try:
            self._sock.send("\n".join(fields).encode())
        except OSError as exc:
            log.debug("sd_notify %s failed: %s", fields, exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """The service is up (``READY=1``)."""
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> bool:
        """A reload starts (``RELOADING=1`` with ``MONOTONIC_USEC``, as Type=notify-reload wants)."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        """The service is shutting down (``STOPPING=1``)."""
        return self.notify("STOPPING=1")

    def status(self, text: str) -> bool:
        """A one-line status for ``systemctl status``."""
        return self.notify(f"STATUS={text.replace(chr(10), ' ')}")

    def watchdog(self) -> bool:
        """Keep-alive ping (``WATCHDOG=1``)."""
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        """Close the notify socket."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def watchdog_interval(env: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings: half of ``$WATCHDOG_USEC``, or None when off.

    ``$WATCHDOG_PID``, when set, must be this process (sd_watchdog_enabled(3)).
    """
    env = os.environ if env is None else env
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(raw)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", raw)
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


def listen_fds(env: MutableMapping[str, str] | None = None, *, unset: bool = True) -> list[socket.socket]:
    """Sockets passed by systemd socket activation (``$LISTEN_FDS`` for this ``$LISTEN_PID``).

    Args:
        env: environment to read (default ``os.environ``).
        unset: remove the variables so child processes do not take the sockets for theirs.
    """
    env = os.environ if env is None else env
    pid, count = env.get("LISTEN_PID"), env.get("LISTEN_FDS")
    if unset:
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            env.pop(name, None)
    if not pid or not count or pid != str(os.getpid()):
        return []
    try:
        n = int(count)
    except ValueError:
        log.warning("ignoring LISTEN_FDS=%r: not an integer", count)
        return []
    sockets = []
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + n):
        os.set_inheritable(fd, False)
        sockets.append(socket.socket(fileno=fd))
    return sockets
