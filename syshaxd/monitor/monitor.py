"""The monitor: scrapes every engine and samples the host, into one immutable Snapshot.

It runs on its own cadence (``monitor.interval``) and nothing on the request path waits
for it: requests read :meth:`Monitor.snapshot`, which only returns the latest picture.
(sysHAX 0.2 scraped from the request path, and under load its scrapes piled up.)

Each round starts a scrape of every engine that is not still busy with the previous one,
all concurrently over the engines' keep-alive connections (:mod:`~syshaxd.monitor.fetch`), each bounded by
``monitor.scrape_timeout``. An engine without a fresh, readable answer in a round has
missed a scrape: after ``stale_after`` misses in a row it is STALE (its numbers are kept
but old), after ``down_after`` it is DOWN. A refused connection means nothing listens, so
the engine is DOWN at once. One good scrape makes it UP again. An engine that keeps missing
scrapes by timeout while it still streams answers to the conductor (``answered_at``) stays
STALE instead of DOWN: under overload /metrics answers late, but the engine is serving.

The monitor knows nothing of the conductor: engine enabled/draining flags and in-flight
counts are merged into the snapshot's EngineViews by the conductor
(``dataclasses.replace``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import httpx

from syshaxd.config import EngineSpec
from syshaxd.config import Monitor as MonitorSettings
from syshaxd.engines import RATE_WINDOW, Dialect, MetricsParseError, RateTracker, get_dialect
from syshaxd.monitor.fetch import Fetcher, HttpxFetcher, PoolFetcher, ScrapeError
from syshaxd.monitor.host import HostSampler
from syshaxd.snapshot import EngineMetrics, EngineState, EngineView, HostView, Snapshot

log = logging.getLogger("syshaxd.monitor")

Listener = Callable[[Snapshot], None]


@dataclass(frozen=True)
class _Outcome:
    """What one scrape brought back."""

    metrics: EngineMetrics | None  # None: the scrape failed
    error: str | None = None  # the failure, or a warning about a good scrape
    refused: bool = False
    at: float = 0.0  # time.monotonic() when the answer arrived
    wall: float = 0.0  # time.time() of the same moment


class _Engine:
    """One engine's scrape state across rounds."""

    def __init__(self, spec: EngineSpec, rate_window: float) -> None:
        self.spec = spec
        self.dialect: Dialect = get_dialect(spec.dialect)
        self.rates = RateTracker(rate_window)
        self.state = EngineState.UNKNOWN
        self.misses = 0
        self.metrics = EngineMetrics()
        self.last_error: str | None = None
        self.scraped_at: float | None = None
        self.task: asyncio.Task[_Outcome] | None = None

    def succeed(self, outcome: _Outcome) -> None:
        assert outcome.metrics is not None
        if self.state is EngineState.DOWN:
            self.rates.reset()  # it probably restarted: old counters say nothing about now
        self.metrics = self.rates.update(outcome.metrics, outcome.at)
        self.misses = 0
        self.scraped_at = outcome.wall
        self.last_error = outcome.error
        self._set(EngineState.UP)

    def miss(self, error: str, settings: MonitorSettings, refused: bool = False, answering: bool = False) -> None:
        self.misses = max(self.misses + 1, settings.down_after if refused else 0)
        self.last_error = error
        if self.misses >= settings.down_after and answering and not refused:
            # Slow scrapes from an engine that streams answers right now: an overloaded engine
            # (or a busy syshaxd), not a dead one. DOWN would refuse requests it is serving.
            self.last_error = f"{error}; still answering requests, so kept stale, not down"
            self._set(EngineState.STALE)
        elif self.misses >= settings.down_after:
            self._set(EngineState.DOWN)
        elif self.misses >= settings.stale_after:
            self._set(EngineState.STALE)

    def _set(self, state: EngineState) -> None:
        if state is self.state:
            return
        if state is EngineState.UP:
            log.info("engine %s (%s) is up", self.spec.name, self.spec.url)
        else:
            log.warning("engine %s (%s) is %s: %s", self.spec.name, self.spec.url, state.value, self.last_error)
        self.state = state

    def view(self) -> EngineView:
        spec = self.spec
        return EngineView(
            name=spec.name, device=spec.device, url=spec.url, dialect=spec.dialect, state=self.state,
            last_error=self.last_error, scraped_at=self.scraped_at, metrics=self.metrics,
        )


class Monitor:
    """Polls engines and host in the background; ``snapshot()`` is the latest picture.

    Args:
        engines: the resolved engines (``syshaxd.config.engine_specs(config)``).
        settings: the ``monitor`` config section.
        host: the host sampler (default: a real one); pass ``None`` via ``sample_host=False``
            to skip host sampling.
        client: an HTTP client to use (default: one owned and closed by the monitor).
        rate_window: seconds over which token rates are averaged.
    """

    def __init__(
        self,
        engines: Sequence[EngineSpec],
        settings: MonitorSettings,
        *,
        host: HostSampler | None = None,
        sample_host: bool = True,
        client: httpx.AsyncClient | None = None,
        fetcher: Fetcher | None = None,
        rate_window: float = RATE_WINDOW,
    ) -> None:
        self.settings = settings
        self._engines = [_Engine(spec, rate_window) for spec in engines]
        self._host = host
        self._sample_host = sample_host
        self._host_view = HostView()
        self._fetcher: Fetcher | None = fetcher or (HttpxFetcher(client) if client is not None else None)
        self._owns_fetcher = self._fetcher is None
        self._listeners: list[Listener] = []
        self._loop_task: asyncio.Task[None] | None = None
        #: When each engine last sent answer bytes to the conductor (time.monotonic(), by
        #: engine name); set by the daemon. An engine answering within the window a DOWN
        #: verdict covers is not marked down for slow scrapes.
        self.answered_at: Callable[[str], float | None] | None = None
        #: Whether anything is asked of the box (requests, a console watching); set by the
        #: daemon. While nothing is, engines are scraped every ``monitor.idle_interval`` s.
        self.busy: Callable[[], bool] | None = None
        self._snapshot = self._build(time.time())

    # -- reading ----------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The latest snapshot (never blocks, never scrapes)."""
        return self._snapshot

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(snapshot)`` after every round; returns a function that removes it.

        Listeners run in the monitor's task: they must be quick and must not block.
        """
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def set_interval(self, seconds: float) -> None:
        """Change the polling interval (a runtime key); the next round uses it."""
        self.settings = self.settings.model_copy(update={"interval": seconds})

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Start polling in the background (the first round starts at once)."""
        if self._loop_task is not None:
            return
        if self._fetcher is None:
            self._fetcher = PoolFetcher()
        if self._sample_host and self._host is None:
            self._host = await asyncio.to_thread(HostSampler)
        self._loop_task = asyncio.create_task(self._run(), name="syshaxd-monitor")

    async def stop(self) -> None:
        """Stop polling, cancel scrapes in flight and release the client and NVML."""
        tasks = [t for t in (self._loop_task, *(e.task for e in self._engines)) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._loop_task = None
        for engine in self._engines:
            engine.task = None
        if self._owns_fetcher and self._fetcher is not None:
            await self._fetcher.aclose()
            self._fetcher = None
        if self._host is not None:
            self._host.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last = -math.inf
        while True:
            started = loop.time()
            # An idle box is looked at less often: the engines' numbers matter to the next
            # request, and the first one after an idle spell brings the pace back within a round.
            pace = max(self.settings.idle_interval, self.settings.interval)
            if self.busy is None or self.busy() or started - last >= pace:
                last = started
                try:
                    await self.poll_once()
                except Exception:  # a bug in one round must not end monitoring for good
                    log.exception("monitor round failed")
            await asyncio.sleep(max(0.0, started + self.settings.interval - loop.time()))

    # -- one round --------------------------------------------------------------------

    async def poll_once(self) -> Snapshot:
        """Run one round: scrape every engine, sample the host, publish the snapshot."""
        if self._fetcher is None:
            raise RuntimeError("Monitor.poll_once() needs start() first (or a client)")
        for engine in self._engines:
            if engine.task is None:
                engine.task = asyncio.create_task(self._scrape(engine), name=f"scrape-{engine.spec.name}")
        pending = [e.task for e in self._engines if e.task is not None]
        host_task = asyncio.create_task(self._sample()) if self._host is not None else None
        if pending:
            await asyncio.wait(pending, timeout=self.settings.interval)
        for engine in self._engines:
            task = engine.task
            if task is None or not task.done():
                engine.miss(f"no answer to /metrics yet after {self.settings.interval:g}s", self.settings,
                            answering=self._answering(engine))
                continue
            engine.task = None
            outcome = task.result()
            if outcome.metrics is not None:
                engine.succeed(outcome)
            else:
                engine.miss(outcome.error or "scrape failed", self.settings, outcome.refused,
                            answering=self._answering(engine))
        if host_task is not None:
            self._host_view = await host_task
        return self._publish()

    def _answering(self, engine: _Engine) -> bool:
        """Whether the engine sent answer bytes within the span a DOWN verdict covers."""
        if self.answered_at is None:
            return False
        at = self.answered_at(engine.spec.name)
        span = self.settings.down_after * self.settings.interval + self.settings.scrape_timeout
        return at is not None and time.monotonic() - at <= span

    async def _sample(self) -> HostView:
        assert self._host is not None
        try:
            # NVML and sysfs reads are quick, but not guaranteed to be: keep them off the loop.
            return await asyncio.to_thread(self._host.sample)
        except Exception as exc:  # a failing sensor must not stop engine monitoring
            log.warning("host sample failed: %s", exc)
            return self._host_view

    async def _scrape(self, engine: _Engine) -> _Outcome:
        timeout = self.settings.scrape_timeout
        try:
            metrics, warning = await asyncio.wait_for(self._fetch(engine), timeout)
        except asyncio.TimeoutError:
            return _Outcome(None, f"no answer within {timeout:g}s")
        except ScrapeError as exc:
            return _Outcome(None, str(exc), refused=exc.refused)
        except MetricsParseError as exc:
            return _Outcome(None, f"unreadable answer: {exc}")
        except _BadStatus as exc:
            return _Outcome(None, str(exc))
        return _Outcome(metrics, warning, at=time.monotonic(), wall=time.time())

    async def _fetch(self, engine: _Engine) -> tuple[EngineMetrics, str | None]:
        dialect, base = engine.dialect, engine.spec
        if dialect.metrics_path is None:
            await self._get(base, dialect.health_path)
            return EngineMetrics(), None
        text = await self._get(base, dialect.metrics_path)
        metrics = dialect.parse(text)
        warning = None
        if metrics == EngineMetrics():
            warning = f"no {dialect.name} numbers in {dialect.metrics_path} (is the dialect right?)"
        if dialect.slots_path and dialect.read_slots and metrics.kv_cache_usage is None:
            try:
                slots = dialect.read_slots(await self._get(base, dialect.slots_path))
            except (ScrapeError, MetricsParseError, _BadStatus) as exc:
                # llama-server without --slots: no KV figure, but the engine is fine.
                warning = warning or f"no KV-cache usage: {dialect.slots_path}: {exc}"
            else:
                metrics = replace(metrics, kv_cache_usage=slots.kv_cache_usage,
                                  generation_tokens_running=slots.decoding_tokens)
        return metrics, warning

    async def _get(self, engine: EngineSpec, path: str) -> str:
        assert self._fetcher is not None
        status, text = await self._fetcher.get(engine, path)
        if status >= 400:
            raise _BadStatus(f"{path} answered HTTP {status}")
        return text

    def _build(self, now: float) -> Snapshot:
        return Snapshot(taken_at=now, engines=tuple(e.view() for e in self._engines), host=self._host_view)

    def _publish(self) -> Snapshot:
        self._snapshot = self._build(time.time())
        for listener in list(self._listeners):
            try:
                listener(self._snapshot)
            except Exception:  # one faulty listener must not starve the others
                log.exception("monitor listener failed")
        return self._snapshot


class _BadStatus(Exception):
    """An engine answered with an HTTP error status."""
