"""Child processes that never outlive the demo.

Each child runs in its own session (so its process group can be signalled as a whole, and
a Ctrl-C typed at the terminal reaches the demo, which then stops the children in order),
and asks the kernel to send it SIGTERM if the demo dies without cleaning up
(``PR_SET_PDEATHSIG``, Linux). :meth:`Supervisor.stop_all` ends them newest first:
SIGTERM to the group, a grace period, then SIGKILL. It is idempotent and registered with
:mod:`atexit`, so every way out of the demo runs it.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec. Best effort: without prctl (not Linux) the
    # atexit and signal handlers of the demo are still there.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Child:
    """A started child process and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path | None
    log_file: IO[bytes] | None
    own_group: bool

    @property
    def pid(self) -> int:
        """The child's process id (its process group id too when ``own_group``)."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        """The end of the child's log, for an error message."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


class Supervisor:
    """Starts children and guarantees they are gone when the demo ends."""

    def __init__(self, grace: float = 8.0) -> None:
        """Children get ``grace`` seconds after SIGTERM before SIGKILL."""
        self.grace = grace
        self.children: list[Child] = []
        self._stopped = False
        atexit.register(self.stop_all)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        own_group: bool = True,
        cwd: Path | None = None,
    ) -> Child:
        """Start ``argv``; output to ``log_path`` (or inherited when None).

        ``own_group=False`` keeps the child in the terminal's foreground process group,
        which a full-screen program such as the console needs.
        """
        if self._stopped:
            raise RuntimeError("the supervisor has already stopped everything")
        log_file = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115 - closed in stop_all
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL if own_group else None,
                stdout=log_file,
                stderr=subprocess.STDOUT if log_file else None,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=own_group,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError:
            if log_file:
                log_file.close()
            raise
        child = Child(name, proc, log_path, log_file, own_group)
        self.children.append(child)
        return child

    def pids(self) -> list[int]:
        """Process ids of the children started so far."""
        return [c.pid for c in self.children]

    def stop(self, child: Child, grace: float | None = None, sig: int = signal.SIGTERM) -> int | None:
        """Stop one child (its whole group): ``sig``, wait, SIGKILL. Returns its exit code."""
        grace = self.grace if grace is None else grace
        if child.alive():
            self._signal(child, sig)
            try:
                child.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal(child, signal.SIGKILL)
                child.proc.wait(timeout=10)
        elif child.own_group:
            # The leader is gone; anything it left in its group goes too.
            self._signal(child, signal.SIGKILL)
        if child.log_file and not child.log_file.closed:
            child.log_file.close()
        return child.proc.returncode

    def stop_all(self) -> None:
        """Stop every child, newest first. Safe to call more than once."""
        self._stopped = True
        for child in reversed(self.children):
            with contextlib.suppress(Exception):  # one stubborn child must not keep the others alive
                self.stop(child)

    @staticmethod
    def _signal(child: Child, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if child.own_group:
                os.killpg(child.pid, sig)
            else:
                child.proc.send_signal(sig)


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    child: Child | None = None,
    step: float = 0.1,
    stop: StopFlag | None = None,
) -> None:
    """Call ``check()`` until it returns true.

    Raises:
        StartError: ``child`` died or time ran out.
        Interrupted: ``stop`` was set (a signal arrived) meanwhile.
    """
    deadline = time.monotonic() + timeout
    while True:
        if stop is not None and stop.reason:
            raise Interrupted(stop.reason)
        if child is not None and not child.alive():
            raise StartError(f"{child.name} exited with code {child.proc.returncode} before {what}", child)
        if check():
            return
        if time.monotonic() > deadline:
            raise StartError(f"{what} did not happen within {timeout:.0f}s", child)
        time.sleep(step)


class StopFlag:
    """Set by SIGINT, SIGTERM and SIGHUP; checked where the demo can stop cleanly.

    Handlers only record the signal: raising from a handler can land anywhere (inside
    ``subprocess.Popen`` after the fork, inside logging's lock release where the exception
    is swallowed) and leave a child untracked or the demo running.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        """No signal yet."""
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        """Record the first reason to stop."""
        if self.reason is None:
            self.reason = reason

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.set(signal.Signals(signum).name)

    def install(self) -> dict[int, Any]:
        """Route the signals here; returns the previous handlers for :meth:`restore`."""
        return {sig: signal.signal(sig, self._handler) for sig in self.SIGNALS}

    @staticmethod
    def restore(previous: Mapping[int, Any]) -> None:
        """Put back the handlers :meth:`install` replaced."""
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Interrupted(Exception):
    """A signal asked the demo to stop while it was starting."""


class StartError(Exception):
    """A part of the demo did not come up; the message says which and the log's end."""

    def __init__(self, message: str, child: Child | None = None) -> None:
        tail = child.log_tail() if child is not None else ""
        where = f" (log: {child.log_path})" if child is not None and child.log_path else ""
        super().__init__(message + where + (f"\n--- last lines ---\n{tail}" if tail else ""))
