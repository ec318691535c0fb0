"""The idle recycle: the daemon replaces its own process image once idle, to hand memory back.

After a burst of a thousand streams CPython keeps most of the memory it took: its allocator
returns a 1 MiB arena to the kernel only when every object in it is gone, and the few
objects that outlive a burst (counters, windows, pooled connections) sit in most of them
(docs/reliability.md has the measurements). No collection or ``malloc_trim`` gives that
back; a fresh process does. So, as uWSGI's ``reload-on-rss`` and gunicorn's
``max_requests`` do for workers, syshaxd recycles itself -- but in place, with ``execv``:

- only when idle (nothing in flight or queued for ``system.recycle_idle_seconds`` after
  serving requests) and only when RSS has reached ``system.recycle_rss_ratio`` times the
  RSS of the first start;
- the API stops accepting first and answers whatever arrived meanwhile; the listening
  socket stays open throughout (a duplicate survives ``execv`` as fd 3, announced with
  the socket-activation variables), so connections made during the switch wait in the
  kernel's listen queue and are answered by the new image -- none is refused;
- the pid stays the same, so systemd (``NotifyAccess=main``, the watchdog), pid files and
  process monitors keep following it; the control socket is closed and made again, and the
  console reconnects;
- what the operator sees carries over in an anonymous in-memory file (``memfd``, never on
  disk: the config holds the API key): the running config with its unsaved runtime changes
  and their sources, engine flags, the counters, recent decisions and latency windows, the
  start time and RSS, and the recycles so far.

What does not carry over: the Prometheus latency histograms start again (a counter reset,
which Prometheus handles), the loop-lag window, and the engines' token rates (rebuilt from
the next two scrapes).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from syshaxd import __version__
from syshaxd.config import LoadedConfig
from syshaxd.configmodel import Config
from syshaxd.schema import RecycleModel
from syshaxd.systemd import LISTEN_FDS_START

log = logging.getLogger("syshaxd.recycle")

#: The variable naming the inherited memfd that holds the handover.
HANDOVER_ENV = "SYSHAX_HANDOVER_FD"
#: Bumped when the handover's shape changes; a new image ignores another format.
FORMAT = 1
#: Recycles kept in the state (the count goes on).
KEEP_RECYCLES = 10


@cache
def _this_process() -> psutil.Process:
    return psutil.Process()


def current_rss() -> int:
    """This process's resident set size in bytes."""
    return int(_this_process().memory_info().rss)


class IdleRecycle:
    """Decides when the daemon should recycle: once per busy spell, when idle long enough and big.

    ``tick`` is called every ``poll_s``; it returns True once, the first time the daemon has
    been idle for ``idle_s`` after serving requests while its RSS is at least ``ratio``
    times ``rss_start``. A spell that ends below the ratio is not looked at again.
    """

    def __init__(self, *, busy: Callable[[], bool], served: Callable[[], int], rss: Callable[[], int],
                 rss_start: int, idle_s: float, ratio: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.busy = busy
        self.served = served
        self.rss = rss
        self.rss_start = rss_start
        self.idle_s = idle_s
        self.ratio = ratio
        self._clock = clock
        self._last_served = served()
        self._dirty = False
        self._idle_since: float | None = None

    def tick(self, now: float | None = None) -> bool:
        """One check; True when the daemon should recycle now."""
        now = self._clock() if now is None else now
        served = self.served()
        if served != self._last_served:
            self._dirty, self._idle_since, self._last_served = True, None, served
        if self.busy():
            self._dirty, self._idle_since = True, None
            return False
        if not self._dirty:
            return False
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since < self.idle_s:
            return False
        self._dirty, self._idle_since = False, None
        rss = self.rss()
        if rss < self.ratio * self.rss_start:
            log.debug("idle, RSS %.1f MB is below %.2f x %.1f MB: no recycle", rss / 2**20, self.ratio,
                      self.rss_start / 2**20)
            return False
        return True


class Handover(BaseModel):
    """What one image of the daemon hands the next (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    format: int = FORMAT
    #: the version of the image that wrote it (the code on disk may have changed since)
    version: str = __version__
    config: dict[str, Any]
    config_path: str | None = None
    overrides_path: str | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    last_saved: dict[str, Any] = Field(default_factory=dict)
    engine_flags: dict[str, dict[str, bool]] = Field(default_factory=dict)
    stats: dict[str, Any] = Field(default_factory=dict)
    started_monotonic: float
    rss_start: int
    #: the recycle that produced this handover is the last one (rss_after and pause unset)
    recycles: int
    recent_recycles: list[RecycleModel] = Field(default_factory=list)
    began_monotonic: float

    def loaded_config(self) -> LoadedConfig:
        """The running config as the old image had it, files not read again."""
        return LoadedConfig(
            config=Config.model_validate_json(json.dumps(self.config)),
            path=Path(self.config_path) if self.config_path else None,
            overrides_path=Path(self.overrides_path) if self.overrides_path else None,
            sources=dict(self.sources),
        )


def config_data(config: Config) -> dict[str, Any]:
    """``config`` as JSON data with secrets in clear (it goes to the next image, not to disk)."""

    def plain(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(config.model_dump(mode="python"))  # type: ignore[no-any-return]


def take_handover(env: dict[str, str] | os._Environ[str] | None = None) -> Handover | None:
    """The handover an earlier image left in ``$SYSHAX_HANDOVER_FD``, or None.

    The variable is removed and the descriptor closed either way. A handover that cannot
    be read is logged and ignored: the daemon then starts as on a cold start.
    """
    env = os.environ if env is None else env
    raw = env.pop(HANDOVER_ENV, None)
    if raw is None:
        return None
    try:
        fd = int(raw)
    except ValueError:
        log.error("ignoring %s=%r: not a descriptor", HANDOVER_ENV, raw)
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError) as exc:
        log.error("cannot read the handover from the previous image (fd %d): %s; starting afresh", fd, exc)
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        log.error("ignoring a handover of another format (%r); starting afresh",
                  data.get("format") if isinstance(data, dict) else type(data).__name__)
        return None
    try:
        handover = Handover.model_validate(data)
        handover.loaded_config()  # the running config must still be valid for this version
    except ValueError as exc:
        log.error("ignoring an invalid handover: %s; starting afresh", exc)
        return None
    if handover.version != __version__:
        log.warning("the code on disk changed since syshaxd started: this image is %s, the previous one was %s",
                    __version__, handover.version)
    return handover


def exec_new_image(listen_fd: int, handover: Handover, notify_address: str | None) -> int:
    """Replace this process with a fresh copy of itself; returns only if that failed (exit code).

    ``listen_fd`` is a duplicate of the API's listening socket: it becomes fd 3 and is
    announced as socket activation for this pid. Call this after the event loop has ended.
    """
    payload = handover.model_dump_json().encode()
    try:
        if listen_fd != LISTEN_FDS_START:
            os.dup2(listen_fd, LISTEN_FDS_START, inheritable=True)
            os.close(listen_fd)
        else:
            os.set_inheritable(LISTEN_FDS_START, True)
        memfd = os.memfd_create("syshax-handover", 0)  # no MFD_CLOEXEC: the new image reads it
        _write_all(memfd, payload)
        os.lseek(memfd, 0, os.SEEK_SET)
    except OSError as exc:
        log.error("cannot prepare the recycle: %s; exiting so the service manager restarts syshaxd", exc)
        return 1
    os.environ.update({
        "LISTEN_PID": str(os.getpid()),
        "LISTEN_FDS": "1",
        "LISTEN_FDNAMES": "api",
        HANDOVER_ENV: str(memfd),
    })
    if notify_address:
        os.environ["NOTIFY_SOCKET"] = notify_address
    # An ignored signal stays ignored across execv: a reload request (SIGHUP, whose default
    # is to terminate) during the switch must not kill the daemon. The new image handles it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.stdout.flush()
    sys.stderr.flush()
    argv = list(sys.orig_argv)
    try:
        os.execv(sys.executable, argv)
    except OSError as exc:
        log.error("cannot exec %s %s: %s; exiting so the service manager restarts syshaxd",
                  sys.executable, " ".join(argv[1:]), exc)
    return 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
