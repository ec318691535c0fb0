"""A script played to a real syshaxd in lockstep: one step, then wait until the daemon has taken it in.

The daemon runs as a process in front of the scripted engines (:mod:`tests.core.engines`);
requests come from the official openai client, one thread per request; the control socket
says what the daemon decided. After each step the player waits until the daemon has settled:
every request that arrived is placed, waiting in line or refused; every placed request's
current part has reached its engine; every token an engine wrote has reached its client; and
every request whose client saw the end is finished in the daemon's books (the room it gave
back offered to the line). Only then does the next step come, so the daemon sees the
script's order whatever the machine's speed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from sim.scripted import Action
from syshaxd.schema import DecisionModel, RequestRecordModel, StateModel
from tests.core.engines import ScriptedEngines
from tests.core.script import Arrive, Script, Set, classes
from tests.plugins.daemon import wait_control_socket
from tests.plugins.ports import free_port, stop_processes

SETTLE_S = 60.0  # a step the daemon has not taken in by then is a failure, not a wait


@dataclass
class Client:
    """One request as its client saw it."""

    index: int
    max_tokens: int
    service_class: str = "interactive"
    tokens: int = 0
    ended: bool = False
    status: int | None = None  # an error's HTTP status
    thread: threading.Thread | None = None


@dataclass
class Player:
    """Plays a script to a daemon in front of scripted engines."""

    engines: ScriptedEngines
    url: str
    socket_path: Path
    clients: dict[int, Client] = field(default_factory=dict)
    decided: dict[str, DecisionModel] = field(default_factory=dict)
    gpu_done: set[str] = field(default_factory=set)  # split requests whose GPU part ended
    emitted: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=600)
        self.control = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.socket_path)),
                                    base_url="http://syshaxd", timeout=30)

    def close(self) -> None:
        """Close the clients (the threads end with their streams)."""
        for c in self.clients.values():
            if c.thread is not None:
                c.thread.join(30)
        self.client.close()
        self.control.close()

    # -- steps -------------------------------------------------------------------------

    def play(self, script: Script) -> None:
        """Every step in order, each taken in before the next."""
        for number, step in enumerate(script.steps):
            try:
                if isinstance(step, Arrive):
                    self._arrive(step)
                elif isinstance(step, Set):
                    response = self.control.patch("/v1/config", json=step.keys)
                    assert response.status_code == 200, response.text
                elif step.kind in ("first", "finish"):
                    if not self._act(step):
                        continue
                else:
                    self._world(step)
                self._settle()
            except Exception as exc:
                raise AssertionError(f"step {number} ({step}) failed: {exc}") from exc

    def _arrive(self, step: Arrive) -> None:
        c = Client(step.index, step.request.output_tokens, step.request.level.name)
        c.thread = threading.Thread(target=self._request, args=(c,), daemon=True)
        with self.lock:
            self.clients[step.index] = c
        c.thread.start()

    def _request(self, c: Client) -> None:
        try:
            stream = self.client.chat.completions.create(
                model="ds-32b", messages=[{"role": "user", "content": f"r{c.index}"}], max_tokens=c.max_tokens,
                stream=True, extra_headers={"X-Request-ID": f"r{c.index}", "x-syshax-class": c.service_class})
            for chunk in stream:
                for choice in chunk.choices:
                    with self.lock:
                        c.tokens += len(choice.delta.content or "")
        except openai.APIStatusError as exc:
            c.status = exc.status_code
        finally:
            with self.lock:
                c.ended = True

    def _act(self, step: Action) -> bool:
        acted = self.engines.act(step.engine, step.kind)  # type: ignore[arg-type]
        if acted is None:
            return False
        rid, tokens, ended = acted
        with self.lock:
            self.emitted[rid] = self.emitted.get(rid, 0) + tokens
        decision = self.decided[rid]
        if ended and decision.mode == "pd_split" and step.engine == decision.engine.split("+")[0]:  # type: ignore[union-attr]
            self.gpu_done.add(rid)  # the GPU's part of the split is over: the CPU's comes next
        return True

    def _world(self, step: Action) -> None:
        if step.kind == "kv":
            self.engines.world(step.engine, kv_usage=step.value)
            self._wait(lambda s: _engine(s, step.engine).kv_cache_usage == step.value, f"{step.engine} KV seen")
        else:
            up = step.kind == "up"
            self.engines.world(step.engine, metrics_ok=up)
            self._wait(lambda s: _engine(s, step.engine).state == ("up" if up else "down"),
                       f"{step.engine} seen {step.kind}")

    # -- settling ----------------------------------------------------------------------

    def state(self) -> StateModel:
        """GET /v1/state (and remember every decision it shows)."""
        response = self.control.get("/v1/state")
        response.raise_for_status()
        state = StateModel.model_validate(response.json())
        for decision in state.recent_decisions:
            self.decided.setdefault(decision.request_id, decision)
        return state

    def _wait(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + SETTLE_S
        while not done(self.state()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not within {SETTLE_S}s: {what}")
            time.sleep(0.005)

    def _settle(self) -> None:
        deadline = time.monotonic() + SETTLE_S
        why = ""
        while time.monotonic() < deadline:
            holding = self.engines.holding()  # engines first: what the state says next is newer
            state = self.state()
            why = self._unsettled(state, holding)
            if not why:
                return
            time.sleep(0.002)
        raise TimeoutError(f"the daemon did not settle within {SETTLE_S}s: {why}")

    def _unsettled(self, state: StateModel, holding: dict[str, set[str]]) -> str:
        conductor = state.conductor
        with self.lock:
            clients = list(self.clients.values())
            ended = sum(c.ended for c in clients)
            # Refused before any placement (a request taken back after it is counted placed).
            refused = sum(c.status is not None and f"r{c.index}" not in self.decided for c in clients)
            behind = [c.index for c in clients if not c.ended and c.tokens < self.emitted.get(f"r{c.index}", 0)]
            gone = [f"r{c.index}" for c in clients if c.ended]
        finished = sum(conductor.outcomes.values())
        if finished != ended:
            return f"{ended} requests ended at their clients, {finished} in the daemon's books"
        if len(clients) != conductor.requests_total + conductor.queue_depth + refused:
            return (f"{len(clients)} arrived, {conductor.requests_total} placed, {conductor.queue_depth} waiting, "
                    f"{refused} refused")
        if len(self.decided) != conductor.requests_total:
            return f"{len(self.decided)} decisions seen of {conductor.requests_total}"
        if behind:
            return f"clients still owed tokens: {behind[:5]}"
        left = [(rid, name) for name, held in holding.items() for rid in gone if rid in held]
        if left:  # a request taken back: the engine must have let it go before it acts again
            return f"ended requests still held by their engines: {left[:5]}"
        for c in clients:
            rid = f"r{c.index}"
            decision = self.decided.get(rid)
            if c.ended or decision is None or decision.engine is None:
                continue
            engines = decision.engine.split("+")
            where = engines[1] if rid in self.gpu_done and len(engines) > 1 else engines[0]
            if rid not in holding[where]:
                return f"{rid} placed on {where} but not there yet"
        return ""

    def records(self) -> dict[str, RequestRecordModel]:
        """Every finished request's record, by request id."""
        response = self.control.get("/v1/requests", params={"limit": 100_000})
        response.raise_for_status()
        return {r.request_id: r for r in (RequestRecordModel.model_validate(item) for item in response.json())}


def _engine(state: StateModel, name: str) -> Any:
    for engine in state.engines:
        if engine.name == name:
            return engine
    raise KeyError(name)


def daemon_config(ports: dict[str, int], api_port: int, requests: int) -> dict[str, Any]:
    """The daemon's config for the parity history (the runner reads the same limits from it)."""
    return {
        "services": {
            "gpu": {"port": ports["gpu0"], "handoff": "recompute"},
            "cpu": {"port": ports["cpu0"], "handoff": "recompute",
                    "endpoints": [{"name": "cpu1", "host": "127.0.0.1", "port": ports["cpu1"]}]},
            "conductor": {"port": api_port},
        },
        "decider": {"policy": "classic", "gpu_max_batch_size": 4, "cpu_max_batch_size": 2,
                    "auto_pd_offload": False},
        # Scrapes that a loaded machine answers late must not mark an engine stale or down: only
        # the script does (a scripted engine answers its scrapes at once, or fails them).
        "monitor": {"interval": 0.2, "idle_interval": 0, "scrape_timeout": 2.0, "stale_after": 3, "down_after": 4,
                    "startup_check": False},
        "control": {"group": "nogroup"},
        "system": {"request_timeout": 3600, "max_queue_size": 10, "shutdown_grace": 5},
        "logging": {"requests_kept": requests + 100},
        "service": {"classes": classes()},
    }


def start_daemon(tmp: Path, config: dict[str, Any]) -> tuple[subprocess.Popen[bytes], Path]:
    """syshaxd on ``config``, its control socket under ``tmp``; returns the process and the socket."""
    (tmp / "run").mkdir(parents=True, exist_ok=True)
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "RUNTIME_DIRECTORY": str(tmp / "run"),
           "STATE_DIRECTORY": str(tmp / "state")}
    log = open(tmp / "syshaxd.log", "ab")  # noqa: SIM115 - the process holds it; closed with it
    proc = subprocess.Popen([sys.executable, "-m", "syshaxd", "--config", str(path)], stdout=log,
                            stderr=subprocess.STDOUT, env=env)
    log.close()
    socket_path = tmp / "run" / "control.sock"
    try:
        wait_control_socket(socket_path, proc)
    except BaseException:
        stop_processes([proc])
        raise
    return proc, socket_path


__all__ = ["Player", "daemon_config", "free_port", "start_daemon"]
