"""The control API's resources over a real Unix socket: state, events, patch, save, reload."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import yaml

from syshaxd.config import load_config
from syshaxd.config.runtime import RuntimeConfig
from syshaxd.control.app import ControlContext, create_control_app, publish_config_changes
from syshaxd.control.bus import EventBus
from syshaxd.control.peercred import AccessPolicy
from syshaxd.schema import ConfigChangeModel, DecisionModel, ErrorModel, StateModel
from tests.control.conftest import ControlHarness


def read_yaml(path: str) -> object:
    """A YAML file's content."""
    return yaml.safe_load(Path(path).read_text())


async def read_events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs from an SSE response."""
    name, data = "message", ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]
        elif line == "" and data:
            yield name, data
            name, data = "message", ""


async def test_state_has_engines_config_host_and_version(control_api: ControlHarness) -> None:
    async with control_api.client() as client:
        resp = await client.get("/v1/state")
    assert resp.status_code == 200
    state = StateModel.model_validate(resp.json())
    assert [e.name for e in state.engines] == ["gpu0", "cpu0"]
    assert state.engines[1].batch_limit == 8
    assert state.config["decider.policy"] == "classic"
    assert state.config_sources["decider.cpu_max_batch_size"].startswith("file ")
    assert state.host.bound_cpus == [0, 1]
    assert state.version


async def test_patch_applies_and_is_visible_in_state(control_api: ControlHarness) -> None:
    async with control_api.client() as client:
        resp = await client.patch("/v1/config", json={"decider.cpu_max_batch_size": 3, "engines.cpu0.draining": True})
        assert resp.status_code == 200, resp.text
        change = ConfigChangeModel.model_validate(resp.json())
        state = StateModel.model_validate((await client.get("/v1/state")).json())
    assert change.changed == {"decider.cpu_max_batch_size": 3}
    assert change.engines == {"cpu0": {"enabled": True, "draining": True}}
    cpu = next(e for e in state.engines if e.name == "cpu0")
    assert cpu.draining and cpu.batch_limit == 3
    assert state.config_sources["decider.cpu_max_batch_size"] == "runtime (not saved)"


async def test_invalid_multi_key_patch_is_422_and_changes_nothing(control_api: ControlHarness) -> None:
    async with control_api.client() as client:
        before = (await client.get("/v1/state")).json()["config"]
        resp = await client.patch(
            "/v1/config",
            json={"decider.cpu_max_batch_size": 3, "engines.gpu0.enabled": False, "decider.policy": "fastest"},
        )
        after = StateModel.model_validate((await client.get("/v1/state")).json())
    assert resp.status_code == 422
    error = ErrorModel.model_validate(resp.json())
    assert error.key == "decider.policy"
    assert "'classic'" in error.error
    assert after.config == before
    assert all(e.enabled for e in after.engines)


async def test_malformed_bodies_are_422_with_a_message(control_api: ControlHarness) -> None:
    async with control_api.client() as client:
        not_json = await client.patch("/v1/config", content=b"{nope", headers={"content-type": "application/json"})
        a_list = await client.patch("/v1/config", json=[1, 2])
        unknown = await client.get("/v1/nothing")
    assert not_json.status_code == 422 and "not valid JSON" in not_json.json()["error"]
    assert a_list.status_code == 422 and "JSON object" in a_list.json()["error"]
    assert unknown.status_code == 404 and unknown.json()["error"]


async def test_save_then_reload_round_trip(control_api: ControlHarness) -> None:
    async with control_api.client() as client:
        await client.patch("/v1/config", json={"decider.token_limit_max": 700})
        saved = await client.post("/v1/config/save")
        assert saved.status_code == 200, saved.text
        path = saved.json()["path"]
        assert read_yaml(path) == {"decider": {"token_limit_max": 700}}
        await client.patch("/v1/config", json={"decider.token_limit_max": 900})  # unsaved
        # The admin edits the file meanwhile: a runtime key and a restart-only key.
        text = control_api.config_path.read_text().replace("cpu_max_batch_size: 8", "cpu_max_batch_size: 5")
        control_api.config_path.write_text(text + "system:\n  max_queue_size: 7\n")
        reloaded = await client.post("/v1/reload")
        state = StateModel.model_validate((await client.get("/v1/state")).json())
    assert reloaded.status_code == 200
    change = ConfigChangeModel.model_validate(reloaded.json())
    assert change.changed == {"decider.cpu_max_batch_size": 5, "decider.token_limit_max": 700}
    assert change.needs_restart == ["system.max_queue_size"]
    assert state.config["decider.token_limit_max"] == 700
    assert state.config_sources["decider.token_limit_max"] == f"overrides {path}"


async def test_reload_of_a_broken_file_is_422_and_keeps_the_config(control_api: ControlHarness) -> None:
    control_api.config_path.write_text("decider: [oops\n")
    async with control_api.client() as client:
        resp = await client.post("/v1/reload")
        state = StateModel.model_validate((await client.get("/v1/state")).json())
    assert resp.status_code == 422
    assert "unchanged" in resp.json()["error"]
    assert state.config["decider.cpu_max_batch_size"] == 8


async def test_event_stream_carries_state_decision_and_config(control_api: ControlHarness) -> None:
    seen: dict[str, list[str]] = {}
    async with control_api.client() as client, client.stream("GET", "/v1/events") as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for name, data in read_events(resp):
            seen.setdefault(name, []).append(data)
            if name == "state" and len(seen["state"]) == 2:
                control_api.bus.publish(
                    "decision",
                    DecisionModel(time=0, request_id="r1", device="cpu", mode="whole", reason="test", policy="classic"),
                )
                async with control_api.client() as writer:
                    await writer.patch("/v1/config", json={"decider.max_num_seqs": 9})
            if "decision" in seen and "config" in seen:
                break
    assert StateModel.model_validate_json(seen["state"][0]).engines
    assert json.loads(seen["decision"][0])["request_id"] == "r1"
    assert ConfigChangeModel.model_validate_json(seen["config"][0]).changed == {"decider.max_num_seqs": 9}


async def test_event_streams_end_when_the_bus_closes(control_api: ControlHarness) -> None:
    async with control_api.client() as client, client.stream("GET", "/v1/events") as resp:
        names = []

        async def consume() -> None:
            async for name, _ in read_events(resp):
                names.append(name)
                if len(names) == 1:
                    control_api.bus.close()

        await asyncio.wait_for(consume(), 60)  # returns only because the server ended the stream
    assert names[0] == "state"
    assert control_api.bus.subscriber_count == 0


async def test_a_client_that_leaves_is_unsubscribed(control_api: ControlHarness) -> None:
    async with control_api.client() as client:
        async with client.stream("GET", "/v1/events") as resp:
            async for _ in read_events(resp):
                break
            assert control_api.bus.subscriber_count == 1
    for _ in range(1200):  # up to a minute: the server notices the client left on a later turn
        if control_api.bus.subscriber_count == 0:
            break
        await asyncio.sleep(0.05)
    assert control_api.bus.subscriber_count == 0


async def test_too_deep_or_too_big_bodies_are_refused(control_api: ControlHarness) -> None:
    deep = b'{"decider.max_num_seqs": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    big = json.dumps({f"decider.k{i}": i for i in range(100_000)}).encode()
    async with control_api.client() as client:
        too_deep = await client.patch("/v1/config", content=deep, headers={"content-type": "application/json"})
        too_big = await client.patch("/v1/config", content=big, headers={"content-type": "application/json"})
        state = StateModel.model_validate((await client.get("/v1/state")).json())
    assert too_deep.status_code == 422 and "nested too deeply" in too_deep.json()["error"]
    assert too_big.status_code == 413 and too_big.json()["key"] == "(body)"
    assert state.config["decider.max_num_seqs"] == 16


async def test_building_the_app_again_does_not_publish_changes_twice() -> None:
    # The daemon builds a new app each time its socket is made again; only
    # publish_config_changes, called once, puts changes on the bus.
    runtime = RuntimeConfig(load_config(None, env={}, locations=(), use_overrides=False), ["gpu0"])
    bus = EventBus()

    def state() -> StateModel:
        raise AssertionError("no request is served here")

    async def reload() -> ConfigChangeModel:
        return runtime.reload()

    access = AccessPolicy.from_config(runtime.config)
    ctx = ControlContext(runtime=runtime, bus=bus, access=access, state=state, reload=reload)
    create_control_app(ctx)
    subscription = bus.subscribe()
    runtime.apply_patch({"decider.max_num_seqs": 3})
    assert bus.seq == 0
    publish_config_changes(runtime, bus)
    create_control_app(ctx)
    create_control_app(ctx)
    runtime.apply_patch({"decider.max_num_seqs": 4})
    assert bus.seq == 1
    event = await asyncio.wait_for(subscription.__anext__(), 60)
    assert (event.name, ConfigChangeModel.model_validate_json(event.data).changed) == ("config", {"decider.max_num_seqs": 4})
