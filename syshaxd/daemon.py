"""Wires config, monitor, conductor, the OpenAI API and the control socket into one running daemon.

Both HTTP servers (the API on TCP, the control API on a Unix socket) run in one event loop.
The daemon, not uvicorn, owns the signals: SIGTERM/SIGINT drain and stop (a second one
stops at once), SIGHUP rereads the config files. systemd hears about it all through
sd_notify (READY, STATUS, WATCHDOG, RELOADING, STOPPING). Once idle after a burst that left
its memory grown, the daemon replaces its process image in place (:mod:`syshaxd.recycle`).
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

from syshaxd.config import ConfigError, LoadedConfig, engine_specs
from syshaxd.control import ControlContext, create_control_app, publish_states
from syshaxd.control_server import (
    ControlSocket,
    ControlSocketError,
    create_control_socket,
    default_socket_path,
)
from syshaxd.control_state import build_state
from syshaxd.events import EventBus
from syshaxd.peercred import AccessPolicy
from syshaxd.recycle import (
    KEEP_RECYCLES,
    Handover,
    IdleRecycle,
    config_data,
    current_rss,
    exec_new_image,
)
from syshaxd.runtime import RuntimeConfig
from syshaxd.schema import ConfigChangeModel, MemoryModel, RecycleModel, StateModel
from syshaxd.serving import (
    BindError,
    SignalFreeServer,
    api_server,
    bind_tcp,
    control_server,
    describe,
    wait_started,
)
from syshaxd.systemd import Notifier, listen_fds, watchdog_interval

log = logging.getLogger("syshaxd")

#: uvicorn waits this much longer than the conductor's grace, so the conductor ends
#: what is left cleanly (an error event) before uvicorn cancels tasks.
UVICORN_GRACE_MARGIN = 5.0
#: Seconds between STATUS= refreshes.
STATUS_INTERVAL = 2.0
#: Seconds between checks whether an idle recycle is due.
RECYCLE_POLL = 1.0
#: Seconds between checks that the control socket's file is still there.
CONTROL_CHECK_S = 2.0


class DaemonError(Exception):
    """The daemon cannot start; the message is for the operator."""


def run_daemon(loaded: LoadedConfig, handover: Handover | None = None) -> int:
    """Serve until stopped; 0 after a clean stop, 1 when the daemon cannot start.

    After an idle recycle this does not return: the process becomes a fresh image of
    syshaxd, which takes the listening socket and the handover.
    """
    apply_log_level(loaded.config.logging.level)
    daemon = Daemon(loaded, handover)
    try:
        code = asyncio.run(daemon.run())
    except (DaemonError, ControlSocketError, BindError) as exc:
        print(f"syshaxd: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"syshaxd: {exc}", file=sys.stderr)
        return 2
    if daemon.handover is not None and daemon.kept_fd is not None:
        return exec_new_image(daemon.kept_fd, daemon.handover, daemon.notifier.address)
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

    def __init__(self, loaded: LoadedConfig, previous: Handover | None = None) -> None:
        self.loaded = loaded
        self.config = loaded.config
        self.specs = engine_specs(self.config)
        self.runtime = RuntimeConfig(loaded, [s.name for s in self.specs])
        self.bus = EventBus()
        self.notifier = Notifier.from_env()
        self.started = time.monotonic()
        #: The handover this image started from (None on a cold start).
        self.previous = previous
        #: RSS when first ready, kept across recycles (None until ready).
        self.rss_start: int | None = None
        self.recycles = 0
        self.recent_recycles: list[RecycleModel] = []
        if previous is not None:
            self.started = previous.started_monotonic
            self.runtime.restore_flags(previous.engine_flags, previous.last_saved)
            self.rss_start = previous.rss_start
            self.recycles = previous.recycles
            self.recent_recycles = list(previous.recent_recycles)
        #: Set when this image is to be replaced: the handover and the listening socket's duplicate.
        self.handover: Handover | None = None
        self.kept_fd: int | None = None
        self._recycling: RecycleModel | None = None
        self._began_recycle = 0.0
        self.bound_cpus: tuple[int, ...] = ()
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._stop_requested = asyncio.Event()  # SIGTERM/SIGINT (_stop is also set by a recycle)
        self._reload_lock = asyncio.Lock()
        self._signals = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_status = ""
        self._controls: list[ControlSocket] = []  # the control socket, and any made again after a deletion
        self._remade_servers: list[SignalFreeServer] = []
        self._remade_tasks: list[asyncio.Task[None]] = []

    # -- the run ---------------------------------------------------------------------

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the exit code."""
        # The control socket comes first: a second daemon fails on its lock before touching
        # the TCP port or the engines, and never deletes the first one's socket.
        control_path = default_socket_path(self.config)
        control = create_control_socket(control_path, self.config.control.group)
        self._controls = [control]
        try:
            return await self._run_with(control)
        finally:
            for made in reversed(self._controls):  # the newest owns the path and the lock
                made.close()
            self.notifier.close()

    async def _run_with(self, control: ControlSocket) -> int:
        from syshaxd.api import create_api_app
        from syshaxd.conductor import Conductor
        from syshaxd.host import HostSampler
        from syshaxd.monitor import Monitor

        api_sock = self._api_socket()
        self.bound_cpus = _bound_cpus()
        # The host sampler primes psutil's CPU counters: a blocking call, off the loop.
        host = await asyncio.to_thread(HostSampler, bound_cpus=self.bound_cpus)
        self.monitor = Monitor(self.specs, self.config.monitor, host=host)
        self.conductor = Conductor(config=self.config, runtime=self.runtime, monitor=self.monitor, bus=self.bus)
        if self.previous is not None:
            self.conductor.counters.restore(self.previous.stats)
        upstreams = self.conductor.upstreams
        self.monitor.answered_at = lambda name: upstreams[name].answered_at if name in upstreams else None
        self.runtime.on_change(self._on_config_change)
        ctx = ControlContext(
            runtime=self.runtime,
            bus=self.bus,
            access=AccessPolicy.from_config(self.config, control.gid),
            state=self.state,
            reload=self.reload,
        )
        grace = self.config.system.shutdown_grace
        api = api_server(create_api_app(self.conductor, self.config), graceful=grace + UVICORN_GRACE_MARGIN)
        control_api = control_server(create_control_app(ctx))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self._reload_on_signal()))

        await self.monitor.start()
        await self.conductor.start()
        try:
            servers = {
                "API": asyncio.create_task(api.serve(sockets=[api_sock]), name="syshax-api"),
                "control API": asyncio.create_task(control_api.serve(sockets=[control.sock]), name="syshax-control"),
            }
            await wait_started({api: servers["API"], control_api: servers["control API"]})
            log.info(
                "syshaxd ready: API on %s, control socket %s, %d engines, policy %s",
                describe(api_sock), control.path, len(self.specs), self.runtime.policy_name,
            )
            self._note_ready()
            self.notifier.ready(self.status_text())
            self._start_background(ctx)
            self._spawn(self._keep_control_socket(ctx))
            if self.config.system.recycle_when_idle and hasattr(os, "memfd_create"):
                self._spawn(self._recycle_loop(api_sock))
            stopper = asyncio.create_task(self._stop.wait())
            done, _ = await asyncio.wait([stopper, *servers.values()], return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            failed = [name for name, task in servers.items() if task in done]
            if failed:
                log.error("the %s server stopped unexpectedly; shutting down", failed[0])
            elif self._recycling is not None:
                await self._stop_accepting_for_recycle(api, servers["API"])
            await self._shutdown(api, [control_api, *self._remade_servers],
                                 [*servers.values(), *self._remade_tasks], grace)
            if self._recycling is not None and not failed and self._signals == 0:
                self.handover = self._handover(self._recycling)
            return 1 if failed else 0
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self.monitor.stop()
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
            if self.previous is not None:
                log.info("serving on the API socket %s kept across the recycle", describe(sock))
            else:
                log.info("using the socket-activated API socket %s", describe(sock))
            return sock
        svc = self.config.services.conductor
        return bind_tcp(svc.host, svc.port)

    async def _shutdown(
        self, api: SignalFreeServer, controls: list[SignalFreeServer], servers: list[asyncio.Task[None]], grace: float
    ) -> None:
        inflight = sum(self.conductor.stats().inflight.values())
        if self._recycling is None or self._signals:
            log.info("stopping: %d requests in flight, up to %.0fs to finish", inflight, grace)
            self.notifier.stopping()
            self.notifier.status(f"stopping: {inflight} requests in flight, up to {grace:.0f}s to finish")
        if self._recycling is not None and not self._signals:
            self.bus.publish("recycle", self._recycling)  # the console says why the stream ends
        self.bus.close()  # ends every event stream, so the control server can close
        for control in controls:
            control.should_exit = True
        api.should_exit = True
        draining = asyncio.create_task(self.conductor.stop(grace))
        force = asyncio.create_task(self._force.wait())
        await asyncio.wait([draining, force], return_when=asyncio.FIRST_COMPLETED)
        force.cancel()
        if not draining.done():
            draining.cancel()
            await asyncio.gather(draining, return_exceptions=True)
            for server in (api, *controls):  # uvicorn stops waiting for connections
                server.force_exit = True
            await self.conductor.stop(0)
        await asyncio.gather(*servers, return_exceptions=True)
        if self._recycling is None or self._signals:
            log.info("syshaxd stopped")

    # -- signals, reload, status -----------------------------------------------------

    def request_stop(self, sig: int | None = None) -> None:
        """Begin a graceful stop; a second request stops at once."""
        self._signals += 1
        self._stop_requested.set()
        if self._signals > 1:
            log.warning("second stop request: cancelling what is still running")
            self._force.set()
        else:
            name = signal.Signals(sig).name if sig else "request"
            log.info("%s received: draining", name)
        self._stop.set()

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
            self.monitor.set_interval(float(interval))

    def state(self) -> StateModel:
        """The control API's full state."""
        return build_state(
            snapshot=self.conductor.live_snapshot(),
            stats=self.conductor.stats(),
            decisions=self.conductor.recent_decisions(),
            runtime=self.runtime,
            started_monotonic=self.started,
            bound_cpus=self.bound_cpus,
            events_dropped=self.bus.dropped_total,
            memory=self.memory(),
        )

    def memory(self) -> MemoryModel:
        """The daemon's RSS now and at the start, and its recycles."""
        return MemoryModel(rss=current_rss(), rss_start=self.rss_start, recycles=self.recycles,
                           recent_recycles=self.recent_recycles)

    # -- the idle recycle (syshaxd.recycle) -------------------------------------------

    def _note_ready(self) -> None:
        rss = current_rss()
        if self.rss_start is None:
            self.rss_start = rss
        if self.previous is None or not self.recent_recycles:
            return
        last = self.recent_recycles[-1]
        pause = time.monotonic() - self.previous.began_monotonic
        self.recent_recycles[-1] = last.model_copy(update={"rss_after": rss, "pause": pause})
        log.info("recycled: RSS %.1f MB -> %.1f MB (%.1f MB at the first start); new connections waited "
                 "up to %.1f s", last.rss_before / 2**20, rss / 2**20, self.rss_start / 2**20, pause)

    async def _recycle_loop(self, api_sock: socket.socket) -> None:
        system = self.config.system
        assert self.rss_start is not None
        watch = IdleRecycle(busy=self.conductor.busy, served=lambda: self.conductor.counters.requests_total,
                            rss=current_rss, rss_start=self.rss_start, idle_s=system.recycle_idle_seconds,
                            ratio=system.recycle_rss_ratio)
        while not self._stop.is_set():
            await asyncio.sleep(RECYCLE_POLL)
            if watch.tick():
                self._begin_recycle(api_sock)
                return

    def _begin_recycle(self, api_sock: socket.socket) -> None:
        rss = current_rss()
        assert self.rss_start is not None
        try:
            self.kept_fd = os.dup(api_sock.fileno())
        except OSError as exc:
            log.warning("cannot recycle: %s", exc)
            return
        self._began_recycle = time.monotonic()
        self._recycling = RecycleModel(at=time.time(), rss_before=rss)
        text = (f"recycling: idle, RSS {rss / 2**20:.0f} MB is {rss / self.rss_start:.2f}x the "
                f"{self.rss_start / 2**20:.0f} MB at start; replacing the process in place")
        log.info("%s", text)
        self.notifier.reloading()
        self.notifier.status(text)
        self._stop.set()

    async def _stop_accepting_for_recycle(self, api: SignalFreeServer, api_task: asyncio.Task[None]) -> None:
        """The API stops accepting and answers what came meanwhile, to the end.

        The listening socket's duplicate keeps new connections waiting for the next image.
        A request that slipped in as the recycle began may run as long as any request
        (``system.request_timeout``): nothing waits for the recycle, so it is not cut at the
        shutdown grace -- unless a stop is requested meanwhile, which drains as usual.
        """
        longest = self.config.system.request_timeout + UVICORN_GRACE_MARGIN
        api.config.timeout_graceful_shutdown = max(1, int(longest))
        api.should_exit = True
        stop = asyncio.create_task(self._stop_requested.wait())
        await asyncio.wait([api_task, stop], timeout=longest + 1, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()

    def _handover(self, recycling: RecycleModel) -> Handover:
        loaded = self.runtime.loaded()
        assert self.rss_start is not None
        return Handover(
            config=config_data(loaded.config),
            config_path=str(loaded.path) if loaded.path else None,
            overrides_path=str(loaded.overrides_path) if loaded.overrides_path else None,
            sources=loaded.sources,
            last_saved=self.runtime.last_saved,
            engine_flags=self.runtime.all_engine_flags(),
            stats=self.conductor.counters.export(),
            started_monotonic=self.started,
            rss_start=self.rss_start,
            recycles=self.recycles + 1,
            recent_recycles=[*self.recent_recycles, recycling][-KEEP_RECYCLES:],
            began_monotonic=self._began_recycle,
        )

    def status_text(self) -> str:
        """One line for ``systemctl status``: engines, in flight, queued, totals."""
        try:
            snap = self.conductor.live_snapshot()
            stats = self.conductor.stats()
        except Exception:  # the status line must never take the daemon down
            return "running"
        engines = ", ".join(f"{e.name} {e.state.value}" for e in snap.engines)
        inflight = sum(stats.inflight.values())
        return (
            f"{inflight} in flight, {stats.queue_depth} queued, {stats.requests_total} requests; "
            f"policy {self.runtime.policy_name}; {engines}"
        )

    def _start_background(self, ctx: ControlContext) -> None:
        self._spawn(publish_states(ctx, self._stop))
        # llamacpp-slots: check every pair now, so a mismatch is in the log at start; the
        # first split waits for this verdict, and none runs between unmatched servers.
        self._spawn(self.conductor.dispatcher.startup_checks())
        if self.previous is None:  # a recycled image's engines were checked at the first start
            self._spawn(self._startup_check())
        self._spawn(self._status_loop())
        interval = watchdog_interval()
        if interval is not None and self.notifier.enabled:
            self._spawn(self._watchdog_loop(interval))

    async def _startup_check(self) -> None:
        # As sysHAX does: probe every engine, and time a short generation on each when enabled.
        # In the background, bounded, never fatal: requests are served meanwhile.
        from syshaxd.startup import startup_check

        try:
            await startup_check(self.specs, self.config.models.params, generate=self.config.monitor.startup_check,
                                default_model=self.config.models.default)
        except Exception:
            log.exception("startup check failed")

    async def _keep_control_socket(self, ctx: ControlContext) -> None:
        """Make the control socket again when its file is deleted under the daemon (by hand, or
        a cleanup of its directory): the console and ``syshax status`` find the daemon again.

        The old socket keeps serving the clients connected to it until the daemon stops.
        """
        told = ""
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), CONTROL_CHECK_S)
            if self._stop.is_set():
                return
            current = self._controls[-1]
            if current.deleted():
                try:
                    fresh = current.remake()
                except ControlSocketError as exc:
                    if str(exc) != told:
                        log.error("control socket %s was deleted and cannot be made again: %s; the console "
                                  "and syshax status cannot reach this daemon (retrying)", current.path, exc)
                        told = str(exc)
                    continue
                server = control_server(create_control_app(ctx))
                self._controls.append(fresh)
                self._remade_servers.append(server)
                self._remade_tasks.append(asyncio.create_task(server.serve(sockets=[fresh.sock]),
                                                              name="syshax-control"))
                log.warning("control socket %s was deleted under the daemon; made it again", current.path)
                told = ""
            elif current.replaced() and told != "replaced":
                log.error("control socket %s now names a file this daemon did not make; the console and "
                          "syshax status cannot reach it until it restarts", current.path)
                told = "replaced"

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


def _bound_cpus() -> tuple[int, ...]:
    """The CPU engine's binding as the NUMA planner recommends it for this host, if readable."""
    try:
        from syshaxd.numa import plan_for_host

        return tuple(plan_for_host().cpus)
    except Exception as exc:  # no sysfs (containers) or an odd topology: the console just marks none
        log.debug("no NUMA plan for this host: %s", exc)
        return ()
