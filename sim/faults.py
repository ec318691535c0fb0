"""Injected faults: the contract other parts of syshax test against.

``POST /sim/faults`` (JSON, every field optional, omitted fields unchanged),
``GET /sim/faults`` (current), ``DELETE /sim/faults`` (all off); at start
``--fault KEY=VALUE`` (repeatable). Fields:

- ``error_rate`` (0..1): fraction of generation requests answered with an HTTP error
  before the first byte; ``error_status`` (default 500) is its status.
- ``garbage_body``: generation requests get 200 with a body that is not JSON / SSE.
- ``added_latency`` (seconds, wall clock, not scaled by ``--speed``): added before the
  first byte of every generation request.
- ``die_after`` (int or null): the process exits (``os._exit(1)``) when generation request
  number N+1 arrives, counted from when the fault was set.
- ``die_mid_stream``: the process exits after sending the 3rd chunk of the next streamed
  response.
- ``truncate_stream`` (0..1, or true/false for 1/0): fraction of streamed chat and
  completion answers that end cleanly without ``data: [DONE]``: every token chunk (and the
  usage chunk, when asked) is sent and the HTTP response completes normally, but the
  last event is a plain chunk. Streams that never send ``[DONE]`` (the Responses API)
  are not affected.
- ``paused``: the engine computes nothing (it finishes the step it is in) and its clock
  stands still; requests are accepted and wait, /metrics answers. Switching it off resumes
  where it stopped. Tests use it to hold requests in flight for as long as they need.
- ``metrics``: ``ok`` | ``hang`` (never answers) | ``slow`` (answers after 5 wall
  seconds) | ``garbage`` (200, not Prometheus text) | ``contradictory`` (running = -1,
  KV usage 1.7, valid syntax).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

MetricsFault = Literal["ok", "hang", "slow", "garbage", "contradictory"]
METRICS_MODES = ("ok", "hang", "slow", "garbage", "contradictory")
SLOW_METRICS_SECONDS = 5.0
DIE_AFTER_CHUNKS = 3


class FaultError(ValueError):
    """A fault setting that does not fit the contract."""


@dataclass(frozen=True)
class Faults:
    """The current fault settings (all off by default)."""

    error_rate: float = 0.0
    error_status: int = 500
    garbage_body: bool = False
    added_latency: float = 0.0
    die_after: int | None = None
    die_mid_stream: bool = False
    truncate_stream: float = 0.0
    paused: bool = False
    metrics: MetricsFault = "ok"

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``GET /sim/faults`` returns."""
        return asdict(self)


def _coerce(key: str, value: object) -> object:
    if key == "error_rate":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise FaultError(f"error_rate must be a number from 0 to 1, got {value!r}")
        return float(value)
    if key == "truncate_stream":
        if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise FaultError(f"truncate_stream must be a number from 0 to 1 (or true/false), got {value!r}")
        return float(value)
    if key == "error_status":
        if isinstance(value, bool) or not isinstance(value, int) or not 400 <= value <= 599:
            raise FaultError(f"error_status must be an HTTP error status (400-599), got {value!r}")
        return value
    if key in ("garbage_body", "die_mid_stream", "paused"):
        if not isinstance(value, bool):
            raise FaultError(f"{key} must be true or false, got {value!r}")
        return value
    if key == "added_latency":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) < 0:
            raise FaultError(f"added_latency must be a number of seconds >= 0, got {value!r}")
        return float(value)
    if key == "die_after":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise FaultError(f"die_after must be a whole number >= 0 or null, got {value!r}")
        return value
    if key == "metrics":
        if value not in METRICS_MODES:
            raise FaultError(f"metrics must be one of {', '.join(METRICS_MODES)}, got {value!r}")
        return value
    raise FaultError(f"unknown fault {key!r}; known: {', '.join(f.name for f in fields(Faults))}")


def apply_patch(current: Faults, patch: object) -> Faults:
    """Faults with the fields of a JSON object changed; nothing changes on error."""
    if not isinstance(patch, dict):
        raise FaultError("send a JSON object, e.g. {\"error_rate\": 0.5}")
    changes: dict[str, Any] = {key: _coerce(key, value) for key, value in patch.items()}
    return replace(current, **changes)


def _scalar(text: str) -> object:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on"):
        return True
    if lowered in ("false", "no", "off"):
        return False
    if lowered in ("null", "none", ""):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()


def parse_assignments(items: list[str]) -> Faults:
    """Faults from ``KEY=VALUE`` command-line items."""
    patch: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise FaultError(f"--fault expects KEY=VALUE, got {item!r}")
        patch[key.strip()] = _scalar(value)
    return apply_patch(Faults(), patch)


class FaultState:
    """Faults plus the counters and random stream that act on them."""

    def __init__(self, faults: Faults | None = None, seed: int = 0) -> None:
        self.faults = faults or Faults()
        self.rng = random.Random(seed)
        self.generation_requests = 0  # since the faults were last set
        self.stream_armed = self.faults.die_mid_stream

    def set(self, faults: Faults) -> None:
        """Replace the settings and restart the counters."""
        self.faults = faults
        self.generation_requests = 0
        self.stream_armed = faults.die_mid_stream

    def on_generation_request(self) -> tuple[bool, bool]:
        """Count a generation request; returns (die now, answer with an error)."""
        self.generation_requests += 1
        f = self.faults
        if f.die_after is not None and self.generation_requests > f.die_after:
            return True, False
        error = f.error_rate > 0 and self.rng.random() < f.error_rate
        return False, error

    def take_truncation(self) -> bool:
        """Whether this stream ends without ``data: [DONE]`` (drawn at ``truncate_stream``)."""
        rate = self.faults.truncate_stream
        return rate >= 1.0 or (rate > 0 and self.rng.random() < rate)

    def take_mid_stream_death(self) -> bool:
        """Whether this stream is the one that dies after its 3rd chunk."""
        if self.stream_armed:
            self.stream_armed = False
            return True
        return False
