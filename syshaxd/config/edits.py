"""Changing config files: one key of the admin's YAML file, and the daemon's overrides file.

``syshax config KEY VALUE`` edits the admin's file in place, comments kept, validated as a
whole and written atomically; ``syshax save`` (through the running daemon) writes the
runtime values and engine flags to the overrides file. Values are shown to people the way
the CLI prints them (:func:`display_value`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from syshaxd.config.dotted import get_dotted, set_dotted
from syshaxd.config.files import (
    ConfigError,
    atomic_write,
    dump_mapping,
    edited_text,
    key_lines,
    load_document,
    parse_text,
    to_plain,
)
from syshaxd.config.flags import FLAGS_SECTION, EngineFlags, flags_section
from syshaxd.config.layers import coerce_value
from syshaxd.config.model import RUNTIME_KEYS, Config
from syshaxd.config.validate import prune_null_sections, validate


def set_in_file(path: Path, dotted: str, raw: Any) -> Any:
    """Set one key in a YAML config file, keeping its comments, validated, written atomically.

    Returns the key's new (validated) value. Raises ConfigError for an unknown key, a bad
    value or a broken file; the file is byte-for-byte unchanged then.
    """
    value = coerce_value(dotted, raw)
    doc = load_document(path)
    plain: dict[str, Any] = to_plain(doc)
    set_dotted(plain, dotted, value)
    origins = {
        k: f"{path}:{n}" for k, n in key_lines(doc).items() if not k.startswith(dotted + ".")
    }
    origins[dotted] = ""  # the new value is on the command line, not in the file
    try:
        config = validate(plain, str(path), origins, warn_retired=True)
    except ConfigError as exc:
        raise ConfigError(f"{exc} ({path} left unchanged)", key=exc.key) from None
    text = edited_text(doc, dotted, value)
    if _read_back(text) != prune_null_sections(plain, Config):
        # Never write a file that would read back differently from what was validated.
        raise ConfigError(
            f"cannot represent {dotted}={raw!r} in {path} safely; file left unchanged"
        )
    atomic_write(path, text)
    return get_dotted(config, dotted)


def _read_back(text: str) -> dict[str, Any]:
    """Parse file text the way :func:`~syshaxd.config.layers.load_config` will (for checking an edit)."""
    doc = parse_text(text, "edited text")
    return prune_null_sections(to_plain(doc) or {}, Config)


def runtime_values(config: Config) -> dict[str, Any]:
    """The runtime keys of a config, as plain values by dotted key."""
    return {key: _plain(get_dotted(config, key)) for key in sorted(RUNTIME_KEYS)}


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "********"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def save_overrides(
    path: Path, values: Mapping[str, Any], engines: Mapping[str, EngineFlags] | None = None
) -> None:
    """Write runtime overrides (dotted keys, plain values) as nested YAML, atomically.

    ``engines`` adds each engine's flags that differ from the default (enabled, not draining).
    """
    nested: dict[str, Any] = {}
    for key, value in sorted(values.items()):
        if key not in RUNTIME_KEYS:
            raise ConfigError(f"{key!r} is not a runtime key", key=key)
        set_dotted(nested, key, _plain(value))
    section = flags_section(engines or {})
    if section:
        nested[FLAGS_SECTION] = section
    header = "# Runtime overrides written by syshaxd (syshax save). The admin's YAML file stays untouched.\n"
    atomic_write(path, dump_mapping(nested, header), mode=0o640)


def display_value(value: Any) -> str:
    """A value as the CLI prints it (YAML scalars, JSON for lists, secrets masked)."""
    value = _plain(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)
