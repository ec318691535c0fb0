"""The one control client, both faces: ``syshax``'s (blocking) and the console's (awaited) make the
same calls against a real control socket and tell the operator the same thing when it fails."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from syshaxd.control_client import (
    STATE,
    BlockingControlClient,
    ControlClient,
    ControlError,
    Forbidden,
    ProtocolError,
    Rejected,
    Unreachable,
    patch_call,
)
from syshaxd.schema import StateModel
from tests.control.conftest import ControlHarness


async def both(path: Path, call: Callable[[Any], Any], transport: httpx.MockTransport | None = None
               ) -> tuple[object, object]:
    """What each face makes of the same call: its answer, or the error it raised."""
    def blocking() -> object:
        client = BlockingControlClient(path, transport=transport)
        try:
            return call(client)
        except ControlError as exc:
            return exc
        finally:
            client.close()

    awaited = ControlClient(path, transport=transport)
    try:
        mine: object = await call(awaited)
    except ControlError as exc:
        mine = exc
    finally:
        await awaited.aclose()
    return await asyncio.to_thread(blocking), mine


async def test_both_faces_read_the_same_state_and_make_the_same_change(control_api: ControlHarness) -> None:
    sync, async_ = await both(control_api.socket_path, lambda c: c.call(STATE))
    assert isinstance(sync, StateModel) and isinstance(async_, StateModel)
    assert sync.config == async_.config and {e.name for e in sync.engines} == {"gpu0", "cpu0"}
    def change_it() -> Any:
        client = BlockingControlClient(control_api.socket_path)
        try:
            return client.call(patch_call({"decider.cpu_max_batch_size": 9}))
        finally:
            client.close()

    change = await asyncio.to_thread(change_it)
    assert change.changed == {"decider.cpu_max_batch_size": 9}
    assert control_api.runtime.limits().cpu_max_batch_size == 9
    refused_sync, refused_async = await both(control_api.socket_path,
                                             lambda c: c.call(patch_call({"decider.cpu_max_batch_size": -1})))
    assert isinstance(refused_sync, Rejected) and isinstance(refused_async, Rejected)
    assert refused_sync.message == refused_async.message
    assert refused_sync.message.startswith("decider.cpu_max_batch_size: ") and refused_sync.status == 422


def dead_socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens: what a crashed daemon leaves
    return path


@pytest.mark.parametrize("make,kind,says", [
    (lambda tmp: tmp / "none.sock", Unreachable, "syshaxd is not running: the socket {path} does not exist"),
    (lambda tmp: dead_socket(tmp / "dead.sock"), Unreachable, "syshaxd is not running: connection refused on {path}"),
])
async def test_an_absent_daemon_is_told_alike(short_tmp: Path, make: Callable[[Path], Path], kind: type,
                                              says: str) -> None:
    path = make(short_tmp)
    sync, async_ = await both(path, lambda c: c.call(STATE))
    assert type(sync) is type(async_) is kind
    assert str(sync) == str(async_) and says.format(path=path) in str(sync)


@pytest.mark.parametrize("status,answer,kind,says", [
    (403, {"json": {"error": "uid 1000 may read but not change syshaxd"}}, Forbidden,
     "uid 1000 may read but not change syshaxd"),
    (422, {"json": {"error": "must be at least 0", "key": "decider.x"}}, Rejected, "decider.x: must be at least 0"),
    (502, {"text": "bad gateway from somewhere"}, ControlError, "the daemon answered 502: bad gateway from somewhere"),
    (200, {"json": {"version": "1", "uptime": "soon"}}, ProtocolError, "uptime"),
])
async def test_a_refusal_is_told_alike(status: int, answer: dict[str, Any], kind: type, says: str) -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, **answer))
    sync, async_ = await both(Path("/run/test.sock"), lambda c: c.call(STATE), transport)
    assert type(sync) is type(async_) is kind
    assert str(sync) == str(async_) and says in str(sync)
