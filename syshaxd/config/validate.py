"""Validating raw config data into the model, with one operator-facing message per problem.

A problem names where it was found (``file:line``, an environment variable, the command
line), the dotted key, the bad value and what the key allows; an unknown key comes with
the closest real key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from syshaxd.config.files import ConfigError
from syshaxd.config.keys import KeyInfo, allowed_text, fields_at, section_fields, suggest
from syshaxd.config.model import Config, all_keys

log = logging.getLogger("syshaxd.config")

_RECYCLE_GONE = "the idle self-re-exec is gone (memory is trimmed in place when idle): remove the key"
#: Keys an earlier version took and this one no longer has. They are dropped with a warning,
#: not refused: a config file that started the daemon yesterday must start it after an upgrade.
RETIRED_KEYS: dict[str, str] = {
    "system.recycle_when_idle": _RECYCLE_GONE,
    "system.recycle_idle_seconds": _RECYCLE_GONE,
    "system.recycle_rss_ratio": _RECYCLE_GONE,
}


def _display_key(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _locate(
    loc: tuple[str | int, ...], origins: Mapping[str, str], fallback: str | None
) -> str | None:
    parts = [str(p) for p in loc]
    while parts:
        where = origins.get(".".join(parts))
        if where is not None:
            return where or None  # "" marks a value with no place to point at
        parts.pop()
    return fallback


def format_validation_error(
    exc: ValidationError, origins: Mapping[str, str], fallback: str | None
) -> ConfigError:
    """Turn pydantic's error into one operator-facing message (every problem, once each).

    Args:
        origins: dotted key -> where it was set ("path:line", "environment variable X").
        fallback: where to say a problem is when no origin is known (usually the file).
    """
    problems: list[tuple[str | None, str, str]] = []
    seen: set[str] = set()
    catalogue = all_keys()
    for err in exc.errors():
        loc = tuple(err["loc"])
        shown = _display_key(loc)
        if shown in seen:
            continue
        seen.add(shown)
        where = _locate(loc, origins, fallback)
        value = err.get("input")
        names = [str(p) for p in loc if not isinstance(p, int)]
        if err["type"] == "extra_forbidden":
            parent = loc[:-1]
            allowed = section_fields(Config, parent)
            sibling = suggest(str(loc[-1]), allowed)
            hint = (
                ".".join([*names[:-1], sibling]) if sibling else _elsewhere(str(loc[-1]), catalogue)
            )
            msg = f"unknown key {shown!r}" + (f" (did you mean {hint!r}?)" if hint else "")
            section = _display_key(parent) if parent else "the top level"
            msg += f"; allowed in {section}: {', '.join(allowed)}" if allowed else ""
        elif err["type"] == "value_error":
            msg = str(err["msg"]).removeprefix("Value error, ")
        elif err["type"] == "missing":
            msg = f"{shown} is required: {_allowed_at(loc)}"
        elif err["type"] in ("model_type", "model_attributes_type", "dict_type"):
            fields = section_fields(Config, loc)
            msg = f"{shown} must be a mapping of keys ({', '.join(fields)}), not {value!r}"
        else:
            allowed_here = _allowed_at(loc)
            reason = str(err["msg"])
            msg = f"{shown}: invalid value {value!r}; " + (
                f"allowed: {allowed_here}" if allowed_here else reason[0].lower() + reason[1:]
            )
        problems.append((where, shown, msg))
    first_where, first_key, first_msg = problems[0]
    if len(problems) == 1:
        return ConfigError(first_msg, source=first_where, key=first_key)
    lines = [f"{where}: {msg}" if where else msg for where, _, msg in problems]
    return ConfigError(f"{len(problems)} problems:\n  " + "\n  ".join(lines), key=first_key)


def _allowed_at(loc: tuple[str | int, ...]) -> str:
    """What the field at ``loc`` accepts ("" when ``loc`` is not a field, e.g. a list item)."""
    if not loc or isinstance(loc[-1], int):
        return ""
    info = fields_at(Config, loc[:-1]).get(str(loc[-1]))
    return allowed_text(info.annotation, info) if info is not None else ""


def _elsewhere(name: str, catalogue: Mapping[str, KeyInfo]) -> str | None:
    """A key with this leaf name in another section (``decider.interval`` -> ``monitor.interval``)."""
    matches = [k for k in catalogue if k.rsplit(".", 1)[-1] == name]
    return matches[0] if len(matches) == 1 else None


def prune_null_sections(data: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Drop ``section:`` with nothing under it (every key commented out) instead of failing."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key) if isinstance(key, str) else None
        sub = info.annotation if info is not None else None
        is_section = isinstance(sub, type) and issubclass(sub, BaseModel)
        if is_section and value is None:
            continue
        if is_section and isinstance(value, Mapping):
            assert isinstance(sub, type) and issubclass(sub, BaseModel)
            value = prune_null_sections(value, sub)
        out[key] = value
    return out


def drop_retired(
    data: Mapping[str, Any], origins: Mapping[str, str] | None = None, source: str | None = None,
    *, warn: bool = True,
) -> dict[str, Any]:
    """``data`` without the :data:`RETIRED_KEYS`; each one found is logged as a warning if ``warn``."""
    out = dict(data)
    for key, why in RETIRED_KEYS.items():
        section, _, leaf = key.partition(".")
        inner = out.get(section)
        if isinstance(inner, Mapping) and leaf in inner:
            out[section] = {k: v for k, v in inner.items() if k != leaf}
            if not warn:
                continue
            where = (origins or {}).get(key) or source
            log.warning("%s%s is retired and ignored: %s", f"{where}: " if where else "", key, why)
    return out


def validate(
    data: Mapping[str, Any], source: str | None = None, origins: Mapping[str, str] | None = None,
    *, warn_retired: bool = False,
) -> Config:
    """Validate a raw mapping into a :class:`Config`, or raise :class:`ConfigError`.

    Retired keys are dropped; ``warn_retired`` logs each (once per file read, not per layer).
    """
    kept = drop_retired(data, origins, source, warn=warn_retired)
    try:
        return Config.model_validate(prune_null_sections(kept, Config))
    except ValidationError as exc:
        raise format_validation_error(exc, origins or {}, source) from None
