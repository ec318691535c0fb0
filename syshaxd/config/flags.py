"""Engine flags: each engine's ``enabled``/``draining`` switches and their place in the overrides file.

The flags are not config keys (the admin's file has no ``engines`` section): operators flip
them on the running daemon (``syshax drain``/``enable``, the console) and ``syshax save``
keeps the ones that differ from the default in the overrides file::

    engines:
      cpu0:
        draining: true

An entry naming an engine the config no longer has is dropped with a warning rather than
refused: the admin may rename or remove an engine in the YAML file at any time, and a
stale switch in the daemon's own state file must not keep the service from starting.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from syshaxd.config.files import ConfigError
from syshaxd.config.keys import suggest

log = logging.getLogger("syshaxd.config")

#: The overrides file's section holding the flags, and the flags an engine has.
FLAGS_SECTION = "engines"
ENGINE_FLAGS = ("enabled", "draining")


@dataclass(frozen=True)
class EngineFlags:
    """An engine's operator switches."""

    enabled: bool = True
    draining: bool = False

    def as_dict(self) -> dict[str, bool]:
        """``{"enabled": ..., "draining": ...}`` as the control API shows them."""
        return {"enabled": self.enabled, "draining": self.draining}

    def changed(self) -> dict[str, bool]:
        """Only the flags that differ from a fresh engine's (what ``save`` writes)."""
        default = EngineFlags()
        return {f: getattr(self, f) for f in ENGINE_FLAGS if getattr(self, f) != getattr(default, f)}


def parse_engine_flags(
    section: Any, lines: Mapping[str, int], source: str, engines: Iterable[str]
) -> dict[str, EngineFlags]:
    """The ``engines`` section of an overrides file, checked, as flags by engine name.

    Args:
        section: the section's raw value (``None`` when it is empty).
        lines: line numbers by dotted key, for the messages.
        source: the file, for the messages.
        engines: the configured engine names; other names are dropped with a warning.

    Raises:
        ConfigError: the section, an entry or a value has the wrong shape, naming file:line.
    """
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise _error(f"{FLAGS_SECTION} must map engine names to their flags, e.g. {{cpu0: {{draining: true}}}}",
                     FLAGS_SECTION, lines, source)
    known = list(engines)
    out: dict[str, EngineFlags] = {}
    for name, entry in section.items():
        prefix = f"{FLAGS_SECTION}.{name}"
        flags = _entry(str(name), entry, lines, source)
        if str(name) not in known:
            hint = suggest(str(name), known)
            log.warning(
                "%s:%d: %s names no configured engine%s (engines: %s); its flags are ignored, "
                "and the next `syshax save` drops them",
                source, lines.get(prefix, 1), prefix, f" (did you mean {hint!r}?)" if hint else "",
                ", ".join(known) or "none",
            )
            continue
        out[str(name)] = flags
    return out


def _entry(name: str, entry: Any, lines: Mapping[str, int], source: str) -> EngineFlags:
    prefix = f"{FLAGS_SECTION}.{name}"
    if entry is None:
        return EngineFlags()
    if not isinstance(entry, Mapping):
        raise _error(f"{prefix} must be a mapping of flags (enabled, draining), not {entry!r}", prefix, lines, source)
    values: dict[str, bool] = {}
    for flag, value in entry.items():
        key = f"{prefix}.{flag}"
        if flag not in ENGINE_FLAGS:
            hint = suggest(str(flag), list(ENGINE_FLAGS))
            extra = f" (did you mean '{prefix}.{hint}'?)" if hint else ""
            raise _error(f"unknown engine flag {key!r}{extra}; allowed: enabled, draining", key, lines, source)
        if not isinstance(value, bool):
            raise _error(f"{key}: invalid value {value!r}; allowed: true or false", key, lines, source)
        values[str(flag)] = value
    return EngineFlags(**values)


def _error(message: str, key: str, lines: Mapping[str, int], source: str) -> ConfigError:
    return ConfigError(message, source=f"{source}:{lines.get(key, 1)}", key=key)


def flags_section(flags: Mapping[str, EngineFlags]) -> dict[str, dict[str, bool]]:
    """The ``engines`` section to save: engines whose flags differ from the default, those flags only."""
    return {name: f.changed() for name, f in sorted(flags.items()) if f.changed()}
