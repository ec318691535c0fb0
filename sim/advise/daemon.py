"""What advise reads from and sends to the running daemon, over its control socket.

Reads: the recorded requests (``GET /v1/requests``), the running config and engines
(``GET /v1/state``) and, for each engine that is a simulator, its profile and speed
(``GET /sim/stats`` on the engine itself). Sends: the advice (``POST /v1/advice``) and, with
``--apply``, the recommended settings (one ``PATCH /v1/config``: all or nothing). Every
answer is parsed into the wire schema where it enters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import TypeAdapter, ValidationError

from sim.advise.check import EngineRole
from sim.advise.predict import Box, Daemon
from sim.profile import Profile, ProfileError, load_profile
from syshaxd.cli import CommandError, UsageError
from syshaxd.cli.control import ControlClient
from syshaxd.schema import AdviceModel, ConfigChangeModel, RequestRecordModel, StateModel
from syshaxd.snapshot import Device

__all__ = ["EngineFacts", "apply", "box_of", "daemon_settings", "engine_facts", "fetch_records", "fetch_state",
           "post_advice", "profiles_used", "roles"]

_RECORDS = TypeAdapter(list[RequestRecordModel])
#: Seconds to wait for an engine's /sim/stats (a real engine answers 404 at once).
SIM_STATS_TIMEOUT = 3.0


@dataclass(frozen=True)
class EngineFacts:
    """One engine of the daemon: its name, device and, if a simulator, its profile and speed."""

    name: str
    device: Device
    profile: str | None
    speed: float | None
    url: str = ""
    model: str | None = None  # the first id of its /v1/models (None: it lists none)


def _parsed(what: str, parse: Any, data: Any) -> Any:
    try:
        return parse(data)
    except ValidationError as exc:
        raise CommandError(f"the daemon sent {what} this syshax cannot read: {exc.errors()[0]['msg']}") from None


def fetch_records(client: ControlClient, last: int | None) -> list[RequestRecordModel]:
    """The recorded requests, oldest first (the last ``last`` ones, all kept when None)."""
    url = "/v1/requests" if last is None else f"/v1/requests?limit={last}"
    records: list[RequestRecordModel] = _parsed("records", _RECORDS.validate_python, client.request("GET", url))
    return records


def fetch_state(client: ControlClient) -> StateModel:
    """The daemon's state: running config and engines."""
    state: StateModel = _parsed("a state", StateModel.model_validate, client.request("GET", "/v1/state"))
    return state


def engine_facts(state: StateModel) -> list[EngineFacts]:
    """Each engine, with the profile and speed its simulator reports (None for a real engine)."""
    out = []
    with httpx.Client(timeout=SIM_STATS_TIMEOUT) as http:
        for e in state.engines:
            profile, speed = None, None
            try:
                resp = http.get(f"{e.url.rstrip('/')}/sim/stats")
                data = resp.json() if resp.status_code == 200 else {}
            except (httpx.HTTPError, ValueError):
                data = {}
            if isinstance(data, dict) and isinstance(data.get("profile"), str):
                profile = data["profile"]
                speed = float(data["speed"]) if isinstance(data.get("speed"), (int, float)) else 1.0
            out.append(EngineFacts(e.name, e.device, profile, speed, e.url, _model_of(http, e.url)))
    return out


def _model_of(http: httpx.Client, url: str) -> str | None:
    try:
        data = http.get(f"{url.rstrip('/')}/v1/models").json()
    except (httpx.HTTPError, ValueError):
        return None
    cards = data.get("data") if isinstance(data, dict) else None
    if isinstance(cards, list) and cards and isinstance(cards[0], dict) and isinstance(cards[0].get("id"), str):
        return str(cards[0]["id"])
    return None


def roles(facts: list[EngineFacts]) -> list[EngineRole]:
    """The engines as the profile check sees them."""
    return [EngineRole(f.name, f.device, f.url, f.model, f.profile) for f in facts]


def profiles_used(facts: list[EngineFacts], box: Box, gpu_profile: str | None,
                  cpu_profile: str | None) -> dict[str, tuple[str, Profile]]:
    """Engine name -> (the profile name or file advise replays it with, that profile)."""
    given = {"gpu": gpu_profile, "cpu": cpu_profile}
    names = {f.name: given[f.device] or f.profile or "" for f in facts}
    return {name: (names[name], profile) for name, _, profile in box.engines}


def _load(name_or_path: str, flag: str) -> Profile:
    try:
        return load_profile(name_or_path)
    except ProfileError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def box_of(facts: list[EngineFacts], gpu_profile: str | None, cpu_profile: str | None,
           speed: float | None) -> tuple[Box, dict[str, str]]:
    """The engines to replay on and the profile used per device (for the advice).

    A profile given on the command line wins; else the one the engine's simulator reports.
    """
    given = {"gpu": gpu_profile, "cpu": cpu_profile}
    used: dict[str, str] = {}
    engines: list[tuple[str, Device, Profile]] = []
    for f in facts:
        name = given[f.device] or f.profile
        if name is None:
            raise UsageError(f"engine {f.name} is not a simulator, so its profile is not known: pass "
                             f"--{f.device}-profile NAME_OR_FILE (a file `syshax calibrate` wrote)")
        profile = _load(name, f"--{f.device}-profile" if given[f.device] else f"engine {f.name}'s profile")
        used.setdefault(f.device, name)
        engines.append((f.name, f.device, profile))
    if not any(device == "gpu" for _, device, _ in engines):
        raise CommandError("the daemon has no GPU engine: advise compares settings of a GPU and a CPU engine")
    speeds = sorted({f.speed for f in facts if f.speed is not None})
    if speed is None and len(speeds) > 1:
        raise UsageError(f"the simulated engines run at different speeds ({', '.join(map(str, speeds))}): "
                         "pass --speed")
    chosen = speed if speed is not None else (speeds[0] if speeds else 1.0)
    return Box(tuple(engines), chosen), used


def daemon_settings(state: StateModel) -> Daemon:
    """The daemon settings a replay copies, from the running config (defaults where not shown)."""
    interval = state.config.get("monitor.interval")
    queue = state.conductor.queue_limit
    return Daemon(scrape_interval=float(interval) if isinstance(interval, (int, float)) else 1.0,
                  max_queue=queue if queue > 0 else Daemon.max_queue)


def post_advice(client: ControlClient, advice: AdviceModel) -> None:
    """Keep the advice in the daemon for the console."""
    client.request("POST", "/v1/advice", advice.model_dump(mode="json"))


def apply(client: ControlClient, settings: dict[str, Any]) -> ConfigChangeModel:
    """Send the settings in one PATCH (the daemon applies all or none)."""
    change: ConfigChangeModel = _parsed("a config change", ConfigChangeModel.model_validate,
                                        client.request("PATCH", "/v1/config", settings))
    return change
