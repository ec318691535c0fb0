"""The API's worker processes (``services.conductor.workers`` > 1): started, watched, restarted, stopped.

One event loop relays some tens of thousands of chunks a second; past that, more processes
serve the API port. Each worker gets its own listening socket on the same address
(``SO_REUSEPORT``: the kernel spreads new connections over them), or the daemon's very
socket when systemd passed one without ``ReusePort=yes``, plus one end of a socket pair:
the ledger to the daemon's books (:mod:`syshaxd.conductor.ledger`). The daemon's own routes
(health, metrics, models, docs) are forwarded to the daemon over a private Unix socket, so
they tell the truth about the whole box whichever process a client reached.

A worker that exits unexpectedly is logged and started again (after 1 s, doubling to 30 s
while it keeps failing); its socket is closed meanwhile so that no connection waits on it.
On stop, every worker gets SIGTERM and drains like the daemon; SIGKILL after the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from syshaxd.conductor import Conductor, LedgerSession
from syshaxd.config import Config
from syshaxd.service.servers import bind_tcp, describe

log = logging.getLogger("syshaxd.workers")

#: Seconds a worker has to listen after it was started.
START_TIMEOUT = 30.0
#: Restart delays of a worker that keeps exiting: first, and at most.
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0
#: A worker that ran this long before exiting starts again after the first delay.
STABLE_AFTER = 60.0


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()  # the worker needs the API key; it goes over a pipe, never argv
    return str(value)


def bootstrap(config: Config, *, index: int, own: frozenset[str], info: str, grace: float) -> bytes:
    """What a worker reads on its stdin: the daemon's config as loaded, and its part."""
    data = {"config": config.model_dump(), "index": index, "own": sorted(own), "info": info, "grace": grace}
    return json.dumps(data, default=_plain).encode()


@dataclass
class Worker:
    """One worker process and what it was given."""

    index: int
    sock: socket.socket | None = None  # its listening socket (None when it shares the daemon's)
    process: asyncio.subprocess.Process | None = None
    session: LedgerSession | None = None
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)


class Workers:
    """The worker processes of one daemon run."""

    def __init__(self, config: Config, conductor: Conductor, own: frozenset[str]) -> None:
        self.config = config
        self.conductor = conductor
        self.own = own
        self.count = config.services.conductor.workers - 1  # the daemon serves too
        self.workers = [Worker(index) for index in range(1, self.count + 1)]
        self.stopping = False
        self._api: socket.socket | None = None
        self._dir: str | None = None
        self.info_path = ""

    @property
    def enabled(self) -> bool:
        """Whether this run has workers at all."""
        return self.count > 0

    def info_socket(self) -> socket.socket:
        """The daemon's private Unix socket for the routes workers forward (0700 directory)."""
        self._dir = tempfile.mkdtemp(prefix="syshaxd-")
        self.info_path = os.path.join(self._dir, "api.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.info_path)
        sock.listen(1024)
        sock.setblocking(False)
        return sock

    async def start(self, api: socket.socket) -> None:
        """Start every worker on the API socket ``api``; return once all listen (or failed to)."""
        self._api = api
        for worker in self.workers:
            await self._spawn(worker)
        for worker in self.workers:
            await self._wait_ready(worker)
            worker.watcher = asyncio.create_task(self._watch(worker))

    def _socket_for(self, worker: Worker) -> socket.socket:
        assert self._api is not None
        if not self._api.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
            return self._api  # systemd's socket without ReusePort=yes: all accept from the one
        if worker.sock is None:
            host, port = self._api.getsockname()[:2]
            worker.sock = bind_tcp(host, port, "services.conductor", reuse_port=True)
        return worker.sock

    async def _spawn(self, worker: Worker) -> None:
        listen = self._socket_for(worker)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "syshaxd.service.worker", "--index", str(worker.index),
                "--api-fd", str(listen.fileno()), "--ledger-fd", str(theirs.fileno()),
                stdin=asyncio.subprocess.PIPE, pass_fds=(listen.fileno(), theirs.fileno()))
        finally:
            theirs.close()
        assert worker.process.stdin is not None
        worker.process.stdin.write(bootstrap(self.config, index=worker.index, own=self.own, info=self.info_path,
                                             grace=self.config.system.shutdown_grace))
        await worker.process.stdin.drain()
        worker.process.stdin.close()
        loop = asyncio.get_running_loop()
        _, worker.session = await loop.create_unix_connection(
            lambda: LedgerSession(self.conductor, str(worker.index)), sock=ours)

    async def _wait_ready(self, worker: Worker) -> bool:
        assert worker.session is not None and worker.process is not None
        try:
            pid = await asyncio.wait_for(asyncio.shield(worker.session.ready), START_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionError) as exc:
            log.error("worker %d did not start listening (%s); see its log above", worker.index,
                      exc or f"no word within {START_TIMEOUT:g} s")
            self._kill(worker)
            return False
        where = describe(worker.sock) if worker.sock is not None else "the shared API socket"
        log.info("worker %d (pid %d) serving on %s", worker.index, pid, where)
        return True

    async def _watch(self, worker: Worker) -> None:
        delay = BACKOFF_FIRST
        loop = asyncio.get_running_loop()
        while True:
            assert worker.process is not None
            started = loop.time()
            code = await worker.process.wait()
            if self.stopping:
                return
            self._close_socket(worker)  # connections must not queue on a socket nobody accepts from
            if worker.session is not None:
                await worker.session.closed  # its requests are finished in the books first
            delay = BACKOFF_FIRST if loop.time() - started > STABLE_AFTER else delay
            log.error("worker %d (pid %d) exited with %s; starting it again in %.0f s", worker.index,
                      worker.process.pid, _exit_text(code), delay)
            await asyncio.sleep(delay)
            delay = min(BACKOFF_MAX, delay * 2)
            if self.stopping:
                return
            try:
                await self._spawn(worker)
            except OSError as exc:
                log.error("worker %d cannot be started again: %s", worker.index, exc)
                continue
            await self._wait_ready(worker)

    async def stop(self, grace: float) -> None:
        """SIGTERM every worker (each drains like the daemon); SIGKILL what is left after ``grace`` s."""
        self.stopping = True
        running = [w for w in self.workers if w.process is not None and w.process.returncode is None]
        for worker in running:
            with contextlib.suppress(ProcessLookupError):
                assert worker.process is not None
                worker.process.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(w.process.wait()) for w in running if w.process is not None]
        if waits:
            _, late = await asyncio.wait(waits, timeout=grace)
            if late:
                log.warning("%d workers still running after %.0f s: killing them", len(late), grace)
                self.kill()
                await asyncio.wait(waits, timeout=5)
        for worker in self.workers:
            if worker.session is not None:
                await asyncio.wait([worker.session.closed], timeout=5)

    def kill(self) -> None:
        """SIGKILL every worker (a second stop request)."""
        for worker in self.workers:
            self._kill(worker)

    def _kill(self, worker: Worker) -> None:
        if worker.process is not None and worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()

    def _close_socket(self, worker: Worker) -> None:
        if worker.sock is not None:
            worker.sock.close()
            worker.sock = None

    async def close(self) -> None:
        """Kill what still runs, wait for it, close every socket, remove the private directory."""
        self.stopping = True
        self.kill()
        for worker in self.workers:
            if worker.watcher is not None:
                worker.watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker.watcher
            if worker.process is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(worker.process.wait(), 5)
            if worker.session is not None:
                worker.session.close()
            self._close_socket(worker)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def pids(self) -> list[int]:
        """The running workers' process ids."""
        return [w.process.pid for w in self.workers if w.process is not None and w.process.returncode is None]


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"
