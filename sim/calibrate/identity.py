"""Who answers at the URL calibrate was given, and what device it says it runs on.

calibrate measures one engine. syshaxd in front of two engines answers the same API, and
profiling it would fit one engine's constants to a whole box (both engines, the routing,
the relay), silently: its own routes say who they are (an ``x-syshax`` header, ``"server":
"syshax"`` in ``/get_server_info``, which also names its engines), so calibrate refuses it
and names the engines to calibrate instead. An engine that reports its device (a simulator:
its profile's, ``/sim/stats``) is checked against the ``--device`` asked for. Probe
requests are marked (:data:`PROBE_HEADERS`, :func:`probe_request_id`) so a daemon's records
and ``syshax advise`` can tell them from traffic.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from sim.profile import ProfileError, load_profile

__all__ = ["PROBE_HEADER", "PROBE_ID_PREFIX", "BoxEngine", "box_engines", "probe_request_id", "reported_device"]

#: The header every probe carries: ``x-syshax-probe: calibrate``.
PROBE_HEADER = ("x-syshax-probe", "calibrate")
#: Every probe's ``X-Request-ID`` starts so; syshaxd keeps a client's id as the record's id,
#: which is how ``syshax advise`` leaves probes out of the traffic it replays.
PROBE_ID_PREFIX = "syshax-probe-"


def probe_request_id() -> str:
    """A fresh, unique request id for one probe (engines that take ``X-Request-Id`` need it unique)."""
    return f"{PROBE_ID_PREFIX}calibrate-{os.urandom(8).hex()}"


@dataclass(frozen=True)
class BoxEngine:
    """An engine behind syshaxd, as its ``/get_server_info`` names it."""

    name: str
    device: str
    url: str | None


def box_engines(client: httpx.Client) -> tuple[str, list[BoxEngine]] | None:
    """``(who, engines)`` when ``client``'s URL is syshaxd, else None."""
    try:
        resp = client.get("/get_server_info")
    except httpx.HTTPError:
        return None
    who = resp.headers.get("x-syshax")
    try:
        body = resp.json() if resp.status_code == 200 else {}
    except ValueError:
        body = {}
    if who is None and not (isinstance(body, dict) and body.get("server") == "syshax"):
        return None
    engines = body.get("engines") if isinstance(body, dict) else None
    out = [BoxEngine(str(e.get("name", "?")), str(e.get("device", "?")),
                     e["url"] if isinstance(e.get("url"), str) else None)
           for e in (engines if isinstance(engines, list) else []) if isinstance(e, dict)]
    return who or f"syshaxd/{body.get('version', '?')}", out


def reported_device(client: httpx.Client) -> tuple[str, str] | None:
    """``(device, how the engine says so)``, or None when the engine does not say."""
    try:
        resp = client.get("/sim/stats")
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("profile"), str):
        return None
    try:
        profile = load_profile(data["profile"])
    except ProfileError:
        return None
    return profile.device, f"it simulates profile {data['profile']}, a {profile.device} profile"
