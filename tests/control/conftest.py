"""An in-process control API on a real Unix socket (real uvicorn, real peer credentials).

The state comes from a fixed snapshot instead of a conductor, so these tests exercise the
socket, permissions, runtime config and event stream without engines.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from syshaxd.config import LoadedConfig, load_config
from syshaxd.config.runtime import RuntimeConfig
from syshaxd.control.app import (
    ControlContext,
    create_control_app,
    publish_config_changes,
    publish_states,
)
from syshaxd.control.bus import EventBus
from syshaxd.control.listen import ControlSocket, create_control_socket
from syshaxd.control.peercred import AccessPolicy
from syshaxd.control.state import build_state
from syshaxd.schema import ConductorStatsModel, ConfigChangeModel, StateModel
from syshaxd.service.servers import SignalFreeServer, control_server, wait_started
from syshaxd.snapshot import EngineState, EngineView, Snapshot

#: The uid/gid a privilege-dropping client runs as (Debian's nobody/nogroup).
NOBODY = 65534


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory others can traverse (pytest's tmp_path is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="syshax-ctl-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class ControlHarness:
    """A running control API and its parts."""

    socket_path: Path
    config_path: Path
    runtime: RuntimeConfig
    bus: EventBus
    control: ControlSocket

    def client(self) -> httpx.AsyncClient:
        """An HTTP client over the control socket."""
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket_path))
        return httpx.AsyncClient(transport=transport, base_url="http://syshaxd", timeout=10)


def write_config(directory: Path, group: str = "nogroup", admin_group: str | None = None) -> Path:
    """A config file whose control socket and overrides live in ``directory``."""
    path = directory / "config.yaml"
    admin = f"  admin_group: {admin_group}\n" if admin_group else ""
    path.write_text(
        "decider:\n  policy: classic\n  cpu_max_batch_size: 8\n"
        f"control:\n  socket: {directory / 'control.sock'}\n  group: {group}\n{admin}"
        f"  state_dir: {directory / 'state'}\n"
    )
    return path


def fixed_snapshot() -> Snapshot:
    """Two engines, up, with a few numbers."""
    return Snapshot(
        taken_at=time.time(),
        engines=(
            EngineView(name="gpu0", device="gpu", url="http://127.0.0.1:1", dialect="vllm-v1", state=EngineState.UP),
            EngineView(name="cpu0", device="cpu", url="http://127.0.0.1:2", dialect="llamacpp", state=EngineState.UP),
        ),
    )


@pytest.fixture
def control_options() -> dict[str, str | None]:
    """Override in a test module to change the harness's groups."""
    return {"group": "nogroup", "admin_group": None}


@pytest.fixture
async def control_api(public_dir: Path, control_options: dict[str, str | None]) -> AsyncIterator[ControlHarness]:
    """A control API served by uvicorn on a real socket, stopped and removed afterwards."""
    config_path = write_config(public_dir, control_options["group"] or "nogroup", control_options["admin_group"])

    def loader(use_overrides: bool) -> LoadedConfig:
        return load_config(config_path, env={}, use_overrides=use_overrides)

    loaded = loader(True)
    runtime = RuntimeConfig(loaded, ["gpu0", "cpu0"], loader=loader)
    bus = EventBus()
    started = time.monotonic()

    def state() -> StateModel:
        return build_state(
            snapshot=fixed_snapshot(), stats=ConductorStatsModel(), decisions=[], runtime=runtime,
            started_monotonic=started, bound_cpus=(0, 1), events_dropped=bus.dropped_total,
        )

    async def reload() -> ConfigChangeModel:
        return runtime.reload()

    assert loaded.config.control.socket is not None
    control = create_control_socket(loaded.config.control.socket, loaded.config.control.group)
    ctx = ControlContext(
        runtime=runtime, bus=bus, access=AccessPolicy.from_config(loaded.config, control.gid),
        state=state, reload=reload,
    )
    unpublish = publish_config_changes(runtime, bus)  # once, as the daemon does
    server: SignalFreeServer = control_server(create_control_app(ctx))
    stop = asyncio.Event()
    task = asyncio.create_task(server.serve(sockets=[control.sock]))
    publisher = asyncio.create_task(publish_states(ctx, stop, interval=0.05))
    try:
        await wait_started({server: task})
        yield ControlHarness(control.path, config_path, runtime, bus, control)
    finally:
        stop.set()
        bus.close()
        server.should_exit = True
        await asyncio.gather(task, publisher, return_exceptions=True)
        unpublish()
        control.close()


def run_as_nobody(socket_path: Path, method: str, path: str, body: str | None = None) -> tuple[int, str]:
    """One HTTP request over the socket from a child process that dropped to uid/gid nobody.

    Returns (status, body); status 0 with the error text when the connection itself failed.
    The child imports everything before dropping privileges (the interpreter's files may
    not be readable by nobody).
    """
    import subprocess
    import sys

    script = f"""
import http.client, json, os, socket, sys
class UnixConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect({str(socket_path)!r})
os.setgroups([])
os.setgid({NOBODY})
os.setuid({NOBODY})
assert os.getuid() == {NOBODY} and os.getgid() == {NOBODY}
try:
    conn = UnixConnection("syshaxd")
    conn.request({method!r}, {path!r}, body={body!r}, headers={{"Content-Type": "application/json"}})
    resp = conn.getresponse()
    print(json.dumps([resp.status, resp.read().decode()]))
except OSError as exc:
    print(json.dumps([0, str(exc)]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    import json

    status, text = json.loads(out.stdout)
    return int(status), str(text)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
