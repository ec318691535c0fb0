"""The daemon's own health: how late its event loop runs, and memory handed back when idle.

Every request the conductor serves waits on one event loop, so a loop that wakes timers late
delays every token by as much. :class:`LoopLag` measures that directly -- a timer that should
fire every ``interval`` seconds, and how late it actually fires -- into a Prometheus histogram
and a recent window for the control API.

:class:`IdleTrim` answers a plainer worry of long-running Python servers: after a burst of a
thousand connections, glibc keeps the freed heap mapped, so RSS stays at its peak for the rest
of the process's life even though nothing uses it. Once the conductor has been idle for a few
seconds after serving requests, it collects garbage and asks glibc to return free pages
(``malloc_trim``). On other C libraries this is a no-op.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import time
from collections import deque
from collections.abc import Callable
from functools import cache

from prometheus_client import CollectorRegistry, Counter, Histogram

log = logging.getLogger(__name__)

#: Lag buckets (seconds): a healthy loop is in the first two; seconds mean every stream stalls.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopLag:
    """How late the event loop fires a periodic timer, over a recent window and as a histogram."""

    def __init__(self, registry: CollectorRegistry, *, interval: float = 0.5, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.window_s = window_s
        self._clock = clock
        self._recent: deque[tuple[float, float]] = deque()
        self._hist = Histogram("syshax_event_loop_lag_seconds",
                               "How late the daemon's event loop fires a timer (every request waits as long)",
                               buckets=LAG_BUCKETS, registry=registry)

    def record(self, lag: float, now: float | None = None) -> None:
        """Remember one measurement (seconds late)."""
        now = self._clock() if now is None else now
        lag = max(0.0, lag)
        self._hist.observe(lag)
        self._recent.append((now, lag))
        while self._recent and now - self._recent[0][0] > self.window_s:
            self._recent.popleft()

    def quantiles(self) -> tuple[float | None, float | None]:
        """(p99, max) of the lag over the window, in seconds; (None, None) before any sample."""
        if not self._recent:
            return None, None
        values = sorted(v for _, v in self._recent)
        return values[min(len(values) - 1, int(0.99 * len(values)))], values[-1]

    async def run(self) -> None:
        """Measure until cancelled."""
        while True:
            start = self._clock()
            await asyncio.sleep(self.interval)
            end = self._clock()
            self.record(end - start - self.interval, end)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    result: Callable[[int], int] = fn
    return result


def trim_memory() -> bool:
    """Collect garbage and return free heap pages to the OS; True if the C library could."""
    gc.collect()
    trim = _malloc_trim()
    return bool(trim is not None and trim(0))


class IdleTrim:
    """Trims memory once after each busy spell, when the conductor has been idle for a while."""

    def __init__(self, registry: CollectorRegistry, busy: Callable[[], bool], served: Callable[[], int], *,
                 idle_s: float = 5.0, poll_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.busy = busy
        self.served = served  # requests taken so far: catches requests shorter than a poll
        self._last_served = served()
        self.idle_s = idle_s
        self.poll_s = poll_s
        self._clock = clock
        self._dirty = False  # served something since the last trim
        self._idle_since: float | None = None
        self._trims = Counter("syshax_memory_trims", "Times the daemon returned free memory to the OS "
                              "after a busy spell", registry=registry)

    def tick(self, now: float | None = None) -> bool:
        """One check; returns True when it trimmed."""
        now = self._clock() if now is None else now
        served = self.served()
        if served != self._last_served:  # requests came (and perhaps went) since the last check
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
        started = time.perf_counter()
        released = trim_memory()
        self._trims.inc()
        log.debug("idle: memory trimmed in %.1f ms (released: %s)", (time.perf_counter() - started) * 1e3, released)
        return True

    async def run(self) -> None:
        """Check until cancelled."""
        while True:
            await asyncio.sleep(self.poll_s)
            self.tick()


class Vitals:
    """The loop-lag probe, the idle trim and the process collector of one daemon."""

    def __init__(self, registry: CollectorRegistry, busy: Callable[[], bool], served: Callable[[], int]) -> None:
        from prometheus_client import ProcessCollector

        # process_resident_memory_bytes, process_open_fds, CPU seconds: what a soak watches.
        ProcessCollector(registry=registry)
        self.lag = LoopLag(registry)
        self.trim = IdleTrim(registry, busy, served)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start measuring (inside the running loop)."""
        self._tasks = [asyncio.create_task(self.lag.run(), name="syshax-loop-lag"),
                       asyncio.create_task(self.trim.run(), name="syshax-idle-trim")]

    async def stop(self) -> None:
        """Stop both tasks."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
