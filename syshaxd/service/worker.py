"""One API worker process (``python -m syshaxd.service.worker``, started by the daemon only).

It reads its part on stdin (:func:`syshaxd.service.workers.bootstrap`), serves the API socket
it was passed with its own engine connections, and keeps the books through the ledger
socket it was passed. SIGTERM (or SIGINT) drains: no new connections, what runs finishes
within the grace. When the daemon is gone the worker stops at once: without the books
it must not serve.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

import uvloop

from syshaxd.api import create_worker_api_server
from syshaxd.conductor import Dispatcher, RemoteConductor, RemoteFlight
from syshaxd.config import Config, engine_specs
from syshaxd.engines import ConnectionPool, EngineClient

log = logging.getLogger("syshaxd.worker")

#: Beyond the daemon's shutdown grace, seconds a draining worker gives its last answers.
GRACE_MARGIN = 5.0


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until told to stop; 0 after a drain, 1 when the daemon went away."""
    parser = argparse.ArgumentParser(prog="syshaxd-worker", description="an API worker of syshaxd (started by it)")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--api-fd", type=int, required=True)
    parser.add_argument("--ledger-fd", type=int, required=True)
    args = parser.parse_args(argv)
    boot = json.loads(sys.stdin.buffer.read())
    config = Config.model_validate(boot["config"])
    logging.basicConfig(level=config.logging.level.upper(),
                        format=f"%(asctime)s %(levelname)s %(name)s [worker {args.index}] %(message)s")
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    api = socket.socket(fileno=args.api_fd)
    ledger = socket.socket(fileno=args.ledger_fd)
    code: int = uvloop.run(serve(config, boot, api, ledger))
    return code


async def serve(config: Config, boot: dict[str, Any], api_sock: socket.socket, ledger_sock: socket.socket) -> int:
    """The worker's run: listen, serve, drain."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    gone = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engines = {spec.name: EngineClient(spec) for spec in engine_specs(config)}
    remote = RemoteConductor(engines, config.system.request_timeout, on_gone=gone.set)
    ledger_sock.setblocking(False)
    await loop.create_unix_connection(lambda: remote, sock=ledger_sock)
    dispatcher: Dispatcher[RemoteFlight] = Dispatcher(remote, list(engines.values()), config.services.gpu.handoff)
    daemon = ConnectionPool("syshaxd", 0, unix_path=boot["info"])
    server = create_worker_api_server(dispatcher, remote, config, boot["own"], daemon)
    api_sock.setblocking(False)
    await server.start(api_sock)
    remote.send({"op": "ready", "pid": os.getpid()})
    checks = asyncio.create_task(dispatcher.startup_checks())
    stopping = asyncio.create_task(stop.wait())
    lost = asyncio.create_task(gone.wait())
    await asyncio.wait([stopping, lost], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if gone.is_set() and not stop.is_set():
        log.error("the daemon is gone: stopping now")
        server.abort_all()
        await server.stop(0)
        # A daemon killed outright could not remove its private socket's directory; nothing
        # else will now (several workers may race here: whoever comes first removes it).
        if boot["info"]:
            shutil.rmtree(os.path.dirname(boot["info"]), ignore_errors=True)
        code = 1
    else:
        await server.stop(float(boot["grace"]) + GRACE_MARGIN)
    for task in (checks, stopping, lost):
        task.cancel()
    daemon.close()
    for engine in engines.values():
        await engine.aclose()
    remote.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
