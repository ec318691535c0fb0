"""The control client on httpx.MockTransport: parsing, errors as messages, the SSE stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from console.client import ControlClient, Forbidden, ProtocolError, Rejected, Unreachable
from syshaxd.schema import ConfigChangeModel, DecisionModel, StateModel
from tests.console.fakedaemon import recorded_state, sample_decision

Handler = Callable[[httpx.Request], httpx.Response]


def client_for(handler: Handler) -> ControlClient:
    return ControlClient(Path("/run/test.sock"), transport=httpx.MockTransport(handler))


async def test_state_is_parsed_into_the_wire_schema() -> None:
    state = recorded_state()
    client = client_for(lambda r: httpx.Response(200, content=state.model_dump_json()))
    got = await client.state()
    assert got == state
    await client.aclose()


async def test_patch_sends_flat_dotted_keys_and_returns_the_confirmed_change() -> None:
    seen: list[tuple[str, str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, json.loads(request.content)))
        return httpx.Response(200, json={"changed": {"decider.cpu_max_batch_size": 24}, "source": "patch"})

    change = await client_for(handler).patch({"decider.cpu_max_batch_size": 24})
    assert seen == [("PATCH", "/v1/config", {"decider.cpu_max_batch_size": 24})]
    assert change.changed == {"decider.cpu_max_batch_size": 24}


async def test_a_403_is_forbidden_with_the_daemons_reason() -> None:
    reason = "uid 1000 may read but not change syshaxd (not in group syshax-admin)"
    client = client_for(lambda r: httpx.Response(403, json={"error": reason}))
    with pytest.raises(Forbidden) as caught:
        await client.patch({"decider.auto_pd_offload": True})
    assert caught.value.message == reason and caught.value.status == 403


async def test_a_422_is_rejected_with_reason_and_key() -> None:
    answer = {"error": "decider.cpu_max_batch_size: must be at least 0, got -1", "key": "decider.cpu_max_batch_size"}
    client = client_for(lambda r: httpx.Response(422, json=answer))
    with pytest.raises(Rejected) as caught:
        await client.patch({"decider.cpu_max_batch_size": -1})
    assert caught.value.message == answer["error"] and caught.value.key == "decider.cpu_max_batch_size"


async def test_an_error_without_json_still_gives_a_message() -> None:
    client = client_for(lambda r: httpx.Response(502, text="bad gateway from somewhere"))
    with pytest.raises(Exception) as caught:
        await client.reload()
    assert "502" in str(caught.value) and "bad gateway" in str(caught.value)


async def test_save_and_reload_post_and_accept_an_empty_body() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(f"{request.method} {request.url.path}")
        return httpx.Response(200, content=b"")

    client = client_for(handler)
    assert await client.save() == ConfigChangeModel()
    assert await client.reload() == ConfigChangeModel()
    assert paths == ["POST /v1/config/save", "POST /v1/reload"]


async def test_a_wrong_shape_is_a_protocol_error_naming_the_field() -> None:
    client = client_for(lambda r: httpx.Response(200, json={"version": "1", "uptime": "soon", "time": 1}))
    with pytest.raises(ProtocolError, match="uptime"):
        await client.state()
    client = client_for(lambda r: httpx.Response(200, content=b"<html>"))
    with pytest.raises(ProtocolError):
        await client.state()


class ChunkStream(httpx.AsyncByteStream):
    """A response body delivered in awkward pieces, as a socket may."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def sse_body() -> bytes:
    state = recorded_state().model_dump_json()
    decision = sample_decision(7, 5.0).model_dump_json()
    return (
        "retry: 1000\n"
        f"event: state\ndata: {state}\n\n"
        ": keepalive\n\n"
        "event: dropped\ndata: {\"count\": 3}\n\n"  # unknown to this console: skipped
        f"event: decision\r\ndata: {decision}\r\n\r\n"
        'event: config\ndata: {"changed":\ndata:  {"decider.policy": "classic"}}\n\n'
    ).encode()


async def test_events_parse_state_decision_and_config_across_chunk_boundaries() -> None:
    body = sse_body()
    chunks = [body[i : i + 97] for i in range(0, len(body), 97)]
    client = client_for(lambda r: httpx.Response(200, stream=ChunkStream(chunks),
                                                 headers={"content-type": "text/event-stream"}))  # fmt: skip
    events = [event async for event in client.events()]
    assert [type(e) for e in events] == [StateModel, DecisionModel, ConfigChangeModel]
    assert events[1] == sample_decision(7, 5.0)
    assert isinstance(events[2], ConfigChangeModel) and events[2].changed == {"decider.policy": "classic"}


async def test_events_refused_with_403_raise_forbidden() -> None:
    client = client_for(lambda r: httpx.Response(403, json={"error": "not in group syshax"}))
    with pytest.raises(Forbidden, match="not in group syshax"):
        async for _ in client.events():
            pass


async def test_a_missing_socket_is_unreachable_with_a_hint(tmp_path: Path) -> None:
    client = ControlClient(tmp_path / "nothing.sock")
    with pytest.raises(Unreachable) as caught:
        await client.state()
    assert "does not exist" in caught.value.message and str(tmp_path) in caught.value.message
    with pytest.raises(Unreachable):
        async for _ in client.events():
            pass
    await client.aclose()


async def test_a_dead_socket_file_is_connection_refused(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "dead.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens: what a crashed daemon leaves
    client = ControlClient(path)
    with pytest.raises(Unreachable, match="refused"):
        await client.state()
    await client.aclose()
