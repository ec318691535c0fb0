"""A real syshaxd process with simulator engines: control resources, decisions, lifecycle, systemd."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import yaml

from syshaxd.schema import ConfigChangeModel, DecisionModel, StateModel
from tests.control.conftest import NOBODY, needs_root, run_as_nobody
from tests.plugins.daemon import RunningDaemon, successor, wait_control_socket
from tests.plugins.ports import wait_until

pytestmark = pytest.mark.slow


def chat(daemon: RunningDaemon, max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    """One non-streaming chat completion through the conductor."""
    body = {"model": "ds-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, **extra}
    resp = httpx.post(f"{daemon.url}/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def last_decision(daemon: RunningDaemon, after: int) -> DecisionModel:
    """The newest decision once there are more than ``after``."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        decisions = daemon.state().recent_decisions
        if len(decisions) > after:
            return decisions[-1]
        time.sleep(0.05)
    raise TimeoutError("no new decision recorded")


@contextmanager
def restarted(daemon: RunningDaemon) -> Iterator[subprocess.Popen[bytes]]:
    """The daemon stopped and started again with the same config, environment and state
    directory; yields the new process once its control socket answers, stops it afterwards."""
    assert daemon.stop() == 0
    with successor(daemon, "restarted.log") as proc:
        yield proc


def test_state_of_a_real_daemon(start_daemon: Any) -> None:
    daemon = start_daemon()
    state = daemon.state()
    assert {e.name: e.state for e in state.engines} == {"gpu0": "up", "cpu0": "up"}
    assert state.host.numa_nodes and state.host.cpu_percent
    assert state.host.bound_cpus  # the NUMA planner's binding for this host
    assert state.config["decider.policy"] == "classic"
    assert state.uptime >= 0 and state.version


def test_patch_changes_the_next_decision(start_daemon: Any) -> None:
    daemon = start_daemon()
    before = len(daemon.state().recent_decisions)
    chat(daemon)
    assert last_decision(daemon, before).device == "gpu"  # classic with an idle GPU
    resp = daemon.patch({"decider.policy": "cpu-only"})
    assert resp.status_code == 200, resp.text
    chat(daemon)
    decision = last_decision(daemon, before + 1)
    assert decision.device == "cpu"
    assert decision.policy == "cpu-only"
    resp = daemon.patch({"decider.policy": "classic", "engines.gpu0.enabled": False})
    assert resp.status_code == 200, resp.text
    chat(daemon)
    assert last_decision(daemon, before + 2).device == "cpu"  # the GPU engine is switched off


def test_invalid_multi_key_patch_changes_nothing(start_daemon: Any) -> None:
    daemon = start_daemon()
    before = daemon.state()
    resp = daemon.patch({"decider.cpu_max_batch_size": 2, "engines.cpu0.draining": True, "decider.gpu_cache_threshold": -5})
    after = daemon.state()
    assert resp.status_code == 422
    assert resp.json()["key"] == "decider.gpu_cache_threshold"
    assert after.config == before.config
    assert [(e.enabled, e.draining) for e in after.engines] == [(e.enabled, e.draining) for e in before.engines]


def test_save_then_reload_round_trip_and_sighup(start_daemon: Any) -> None:
    daemon = start_daemon()
    assert daemon.patch({"decider.cpu_max_batch_size": 3}).status_code == 200
    with daemon.control() as client:
        saved = client.post("/v1/config/save").json()
    overrides = daemon.state_dir / "overrides.yaml"
    assert saved["path"] == str(overrides)
    assert yaml.safe_load(overrides.read_text())["decider"]["cpu_max_batch_size"] == 3
    assert daemon.patch({"decider.cpu_max_batch_size": 17}).status_code == 200
    with daemon.control() as client:
        change = ConfigChangeModel.model_validate(client.post("/v1/reload").json())
    assert change.changed == {"decider.cpu_max_batch_size": 3}
    # SIGHUP rereads too: the admin changes a runtime key and a restart-only key.
    data = yaml.safe_load(daemon.config_path.read_text())
    data["decider"]["max_num_seqs"] = 5
    data["system"]["max_queue_size"] = 9
    daemon.config_path.write_text(yaml.safe_dump(data))
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: daemon.state().config["decider.max_num_seqs"] == 5)
    state = daemon.state()
    assert state.config["decider.max_num_seqs"] == 5
    assert state.config["decider.cpu_max_batch_size"] == 3  # the saved override still wins
    assert "system.max_queue_size" in daemon.log_text()  # reported as needing a restart


def test_a_saved_drain_survives_a_restart(start_daemon: Any) -> None:
    daemon = start_daemon()
    assert daemon.patch({"engines.cpu0.draining": True}).status_code == 200
    with daemon.control() as client:
        saved = ConfigChangeModel.model_validate(client.post("/v1/config/save").json())
    assert saved.engines == {"cpu0": {"enabled": True, "draining": True}}
    overrides = daemon.state_dir / "overrides.yaml"
    assert yaml.safe_load(overrides.read_text()) == {"engines": {"cpu0": {"draining": True}}}
    with restarted(daemon):
        flags = {e.name: (e.enabled, e.draining) for e in daemon.state().engines}
        assert flags == {"gpu0": (True, False), "cpu0": (True, True)}


def follow_events(daemon: RunningDaemon, until: Any) -> tuple[threading.Event, threading.Event, list[tuple[str, str]]]:
    """Read a fresh /v1/events stream in a thread until ``until(events)`` is true.

    Returns (subscribed, done, events): ``subscribed`` is set once the first event arrived
    (the stream's subscription exists from then on), ``done`` when ``until`` held.
    """
    events: list[tuple[str, str]] = []
    subscribed, done = threading.Event(), threading.Event()

    def follow() -> None:
        with daemon.control() as client, client.stream("GET", "/v1/events", timeout=30) as resp:
            name = ""
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    events.append((name, line[6:]))
                    subscribed.set()
                    if until(events):
                        done.set()
                        return

    threading.Thread(target=follow, daemon=True).start()
    return subscribed, done, events


def test_a_remade_control_socket_publishes_each_config_change_once(start_daemon: Any) -> None:
    daemon = start_daemon()
    daemon.socket_path.unlink()
    wait_control_socket(daemon.socket_path, daemon.proc)  # made again within seconds

    def after_a_config_a_state(events: list[tuple[str, str]]) -> bool:
        # Both copies of a change are published in one call, before the next state event.
        names = [n for n, _ in events]
        return "config" in names and "state" in names[names.index("config"):]

    subscribed, done, events = follow_events(daemon, after_a_config_a_state)
    assert subscribed.wait(60), "the new control socket sent no event"
    assert daemon.patch({"decider.max_num_seqs": 7}).status_code == 200
    assert done.wait(30), f"no config event, then a state event, within 30 s: {Counter(n for n, _ in events)}"
    configs = [ConfigChangeModel.model_validate_json(data) for name, data in events if name == "config"]
    assert [c.changed for c in configs] == [{"decider.max_num_seqs": 7}]


def test_event_stream_of_a_real_daemon(start_daemon: Any) -> None:
    daemon = start_daemon()
    seen: dict[str, list[str]] = {}
    done = threading.Event()

    def follow() -> None:
        with daemon.control() as client, client.stream("GET", "/v1/events", timeout=30) as resp:
            name = ""
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    seen.setdefault(name, []).append(line[6:])
                if {"state", "decision", "config"} <= seen.keys() and len(seen["state"]) >= 3:
                    break
        done.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    wait_until(lambda: "state" in seen)
    chat(daemon)
    daemon.patch({"decider.max_num_seqs": 7})
    assert done.wait(60), f"events seen: {list(seen)}"
    assert StateModel.model_validate_json(seen["state"][-1]).engines
    assert DecisionModel.model_validate_json(seen["decision"][0]).request_id
    assert ConfigChangeModel.model_validate_json(seen["config"][0]).changed == {"decider.max_num_seqs": 7}


@needs_root
def test_another_uid_is_refused_a_write(start_daemon: Any) -> None:
    daemon = start_daemon()
    status, body = run_as_nobody(daemon.socket_path, "GET", "/v1/state")
    assert status == 200, body
    status, body = run_as_nobody(daemon.socket_path, "PATCH", "/v1/config", '{"engines.gpu0.enabled": false}')
    assert status == 403
    assert f"uid {NOBODY}" in json.loads(body)["error"]
    assert daemon.state().engines[0].enabled
