"""One run of syshaxd: the control socket, the parts, both servers, signals, drain, clean up.

Both HTTP servers (the API on TCP, the control API on a Unix socket) run in one event loop.
The daemon, not uvicorn, owns the signals: SIGTERM/SIGINT drain and stop (a second one
stops at once), SIGHUP rereads the config files. systemd hears about it all through
sd_notify (READY, STATUS, WATCHDOG, RELOADING, STOPPING).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from typing import Any

import uvloop

from syshaxd.config import ConfigError, LoadedConfig, RuntimeConfig, engine_specs
from syshaxd.control import (
    AccessPolicy,
    ControlContext,
    ControlSocketError,
    EventBus,
    build_state,
    create_control_app,
    create_control_socket,
    publish_config_changes,
    publish_states,
)
from syshaxd.locate import default_socket_path
from syshaxd.schema import ConfigChangeModel, MemoryModel, StateModel
from syshaxd.service.control_sockets import ControlSockets
from syshaxd.service.sdnotify import Notifier, listen_fds, watchdog_interval
from syshaxd.service.servers import (
    BindError,
    bind_tcp,
    describe,
    wait_started,
)
from syshaxd.service.startup import startup_check
from syshaxd.service.wiring import Parts, build_parts
from syshaxd.service.workers import Workers

log = logging.getLogger("syshaxd")

#: The API server waits this much longer than the conductor's grace, so the conductor ends
#: what is left cleanly (an error event) before the connections are cut.
API_GRACE_MARGIN = 5.0
#: Seconds between STATUS= refreshes.
STATUS_INTERVAL = 2.0


class DaemonError(Exception):
    """The daemon cannot start; the message is for the operator."""


def run_daemon(loaded: LoadedConfig) -> int:
    """Serve until stopped; 0 after a clean stop, 1 when the daemon cannot start."""
    apply_log_level(loaded.config.logging.level)
    daemon = Daemon(loaded)
    try:
        code: int = uvloop.run(daemon.run())
    except (DaemonError, ControlSocketError, BindError) as exc:
        print(f"syshaxd: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"syshaxd: {exc}", file=sys.stderr)
        return 2
    return code


def apply_log_level(level: str) -> None:
    """Set the daemon's log level (``logging.level``, also changed at run time)."""
    logging.getLogger().setLevel(level.upper())
    # httpx logs every scrape at INFO (several lines a second), and each of the two uvicorn
    # servers announces itself: only at debug are those worth reading.
    quiet = logging.NOTSET if level == "debug" else logging.WARNING
    for name in ("httpx", "uvicorn.error"):
        logging.getLogger(name).setLevel(quiet)


class Daemon:
    """One run of syshaxd: build the parts, serve, drain, clean up."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self.config = loaded.config
        self.specs = engine_specs(self.config)
        self.runtime = RuntimeConfig(loaded, [s.name for s in self.specs])
        self.bus = EventBus()
        publish_config_changes(self.runtime, self.bus)  # once per run, not once per control app
        self.notifier = Notifier.from_env()
        self.started = time.monotonic()
        #: RSS when first ready (None until ready).
        self.rss_start: int | None = None
        self.parts: Parts | None = None
        self.workers: Workers | None = None
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._signals = 0
        self._draining_since: float | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_status = ""

    @property
    def _parts(self) -> Parts:
        assert self.parts is not None, "the daemon's parts are built in run()"
        return self.parts

    # -- the run ---------------------------------------------------------------------

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the exit code."""
        # The control socket comes first: a second daemon fails on its lock before touching
        # the TCP port or the engines, and never deletes the first one's socket.
        control = create_control_socket(default_socket_path(self.config.control.socket), self.config.control.group)
        ctx = ControlContext(runtime=self.runtime, bus=self.bus, access=AccessPolicy.from_config(self.config, control.gid),
                             state=self.state, reload=self.reload, drain=self.drain,
                             requests=lambda limit: self._parts.conductor.recent_requests(limit))
        controls = ControlSockets(control, lambda: create_control_app(ctx))
        try:
            return await self._run_with(controls, ctx)
        finally:
            controls.close()
            self.notifier.close()

    async def _run_with(self, controls: ControlSockets, ctx: ControlContext) -> int:
        api_sock = self._api_socket()
        self.parts = parts = await build_parts(self.config, self.runtime, self.bus)
        self.runtime.on_change(self._on_config_change)
        grace = self.config.system.shutdown_grace
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self._reload_on_signal()))
        await parts.start()
        self.workers = workers = Workers(self.config, parts.conductor, parts.own_paths)
        try:
            await parts.api.start(api_sock)
            if workers.enabled:
                await parts.api.start(workers.info_socket())  # what workers forward: health, metrics, ...
                await workers.start(api_sock)
            servers = {"control API": controls.serve()}
            await wait_started({controls.servers[0]: servers["control API"]})
            processes = workers.count + 1
            log.info("syshaxd ready: API on %s (%d process%s), control socket %s, %d engines, policy %s",
                     describe(api_sock), processes, "es" if processes > 1 else "", controls.path, len(self.specs),
                     self.runtime.policy_name)
            self.rss_start = current_rss()
            self.notifier.ready(self.status_text())
            self._start_background(ctx, controls)
            stopper = asyncio.create_task(self._stop.wait())
            done, _ = await asyncio.wait([stopper, *servers.values()], return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            failed = [name for name, task in servers.items() if task in done]
            if failed:
                log.error("the %s server stopped unexpectedly; shutting down", failed[0])
            await self._shutdown(controls, grace)
            return 1 if failed else 0
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await workers.close()
            await parts.stop()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)

    def _api_socket(self) -> socket.socket:
        activated = listen_fds()
        if activated:
            for extra in activated[1:]:
                log.warning("ignoring extra socket-activated fd %d: the API uses the first", extra.fileno())
                extra.close()
            sock = activated[0]
            sock.setblocking(False)
            log.info("using the socket-activated API socket %s", describe(sock))
            return sock
        svc = self.config.services.conductor
        return bind_tcp(svc.host, svc.port, reuse_port=svc.workers > 1)

    async def _shutdown(self, controls: ControlSockets, grace: float) -> None:
        inflight = sum(self._parts.conductor.inflight().values())
        log.info("stopping: %d requests in flight, up to %.0fs to finish", inflight, grace)
        self.notifier.stopping()
        self.notifier.status(f"stopping: {inflight} requests in flight, up to {grace:.0f}s to finish")
        self.bus.close()  # ends every event stream, so the control server can close
        controls.exit()
        api = asyncio.create_task(self._parts.api.stop(grace + API_GRACE_MARGIN))
        assert self.workers is not None
        workers = asyncio.create_task(self.workers.stop(grace + API_GRACE_MARGIN))
        draining = asyncio.create_task(self._parts.drain(grace))
        force = asyncio.create_task(self._force.wait())
        await asyncio.wait([draining, force], return_when=asyncio.FIRST_COMPLETED)
        force.cancel()
        if not draining.done():
            draining.cancel()
            await asyncio.gather(draining, return_exceptions=True)
            controls.exit(force=True)
            await self._parts.drain(0)
            api.cancel()
            self._parts.api.abort_all()
            self.workers.kill()
        await asyncio.gather(api, workers, *controls.tasks, return_exceptions=True)
        log.info("syshaxd stopped")

    # -- signals, reload, status -----------------------------------------------------

    def request_stop(self, sig: int | None = None) -> None:
        """Begin a graceful stop (a box drain); a second request stops at once."""
        self._signals += 1
        if self._signals > 1:
            log.warning("second stop request: cancelling what is still running")
            self._force.set()
            self._stop.set()
            return
        self.drain(signal.Signals(sig).name if sig else "stop request")

    def drain(self, why: str) -> str:
        """Drain the whole box, then stop: ``/health`` answers 503 at once, what arrives during
        ``system.drain_notice`` is still served (a router needs that long to notice), then the
        port closes and what is in flight finishes (up to ``system.shutdown_grace``).
        SIGTERM, SIGINT and ``syshax drain`` all come here; a second call changes nothing."""
        notice = self.config.system.drain_notice
        if self.parts is None:  # still starting: nothing to drain
            self._stop.set()
            return "stopping"
        if self._draining_since is not None:
            return f"already draining for {time.monotonic() - self._draining_since:.0f} s"
        self._draining_since = time.monotonic()
        self.parts.conductor.box_draining = why
        log.info("%s: draining the box (/health answers 503; new requests served for %.0fs more, "
                 "then in-flight ones finish)", why, notice)
        self.notifier.stopping()
        self.notifier.status(f"draining: /health 503, {notice:.0f}s notice, then finishing in-flight requests")
        if notice > 0:
            asyncio.get_running_loop().call_later(notice, self._stop.set)
        else:
            self._stop.set()
        return (f"/health answers 503 now; new requests are served for {notice:g} s more, then the port "
                f"closes and in-flight requests finish (up to {self.config.system.shutdown_grace:g} s) before syshaxd exits")

    async def reload(self) -> ConfigChangeModel:
        """Reread the config files (SIGHUP, POST /v1/reload), telling systemd while it runs.

        Raises:
            ConfigError: a file is invalid; the running config stays as it was.
        """
        async with self._reload_lock:
            self.notifier.reloading()
            try:
                change = self.runtime.reload()
            except ConfigError as exc:
                log.error("reload failed, keeping the running config: %s", exc)
                raise
            finally:
                self.notifier.ready(self.status_text())
        log.info(
            "config reloaded: %s changed%s", ", ".join(change.changed) or "nothing",
            f"; needs a restart: {', '.join(change.needs_restart)}" if change.needs_restart else "",
        )
        return change

    async def _reload_on_signal(self) -> None:
        with contextlib.suppress(ConfigError):
            await self.reload()

    def _on_config_change(self, change: ConfigChangeModel) -> None:
        level = change.changed.get("logging.level")
        if isinstance(level, str):
            apply_log_level(level)
        interval = change.changed.get("monitor.interval")
        if interval is not None:
            self._parts.monitor.set_interval(float(interval))

    def state(self) -> StateModel:
        """The control API's full state."""
        parts = self._parts
        return build_state(
            snapshot=parts.conductor.live_snapshot(),
            stats=parts.conductor.stats_model(loop_lag=parts.vitals.lag.quantiles()),
            decisions=parts.conductor.recent_decisions(),
            runtime=self.runtime,
            started_monotonic=self.started,
            events_dropped=self.bus.dropped_total,
            memory=MemoryModel(rss=current_rss(), rss_start=self.rss_start),
        )

    def status_text(self) -> str:
        """One line for ``systemctl status``: engines, in flight, queued, totals."""
        try:
            conductor = self._parts.conductor
            snap = conductor.live_snapshot()
            stats = conductor.stats_model()
        except Exception:  # the status line must never take the daemon down
            return "running"
        engines = ", ".join(f"{e.name} {e.state.value}" for e in snap.engines)
        inflight = sum(stats.inflight.values())
        return (
            f"{inflight} in flight, {stats.queue_depth} queued, {stats.requests_total} requests; "
            f"policy {self.runtime.policy_name}; {engines}"
        )

    def _start_background(self, ctx: ControlContext, controls: ControlSockets) -> None:
        self._spawn(publish_states(ctx, self._stop))
        self._spawn(controls.keep(self._stop))
        # llamacpp-slots: check every pair now, so a mismatch is in the log at start; the
        # first split waits for this verdict, and none runs between unmatched servers.
        self._spawn(self._parts.dispatcher.startup_checks())
        self._spawn(self._startup_check())
        self._spawn(self._status_loop())
        interval = watchdog_interval()
        if interval is not None and self.notifier.enabled:
            self._spawn(self._watchdog_loop(interval))

    async def _startup_check(self) -> None:
        # As sysHAX does: probe every engine, and time a short generation on each when enabled.
        # In the background, bounded, never fatal: requests are served meanwhile.
        try:
            await startup_check(self.specs, self.config.models.params, generate=self.config.monitor.startup_check,
                                default_model=self.config.models.default)
        except Exception:
            log.exception("startup check failed")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watchdog_loop(self, interval: float) -> None:
        # Pinged from the event loop itself: a stuck loop misses pings and systemd restarts us.
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    async def _status_loop(self) -> None:
        while True:
            await asyncio.sleep(STATUS_INTERVAL)
            text = self.status_text()
            if text != self._last_status:
                self._last_status = text
                self.notifier.status(text)


def current_rss() -> int:
    """This process's resident set size in bytes (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
