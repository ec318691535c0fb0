"""Configuration: layered loading, operator-facing errors, key edits and saving.

The layers, lowest first: built-in defaults, the administrator's YAML file, the daemon's
runtime overrides file (in its state directory), then ``SYSHAX_SECTION__KEY`` environment
variables. Every user mistake becomes a :class:`ConfigError` whose message names the
file and line (or the variable), the dotted key, the bad value and what is allowed.

This is the module to import from. It re-exports the model (:mod:`syshaxd.config.model`),
the key descriptions (:mod:`syshaxd.config.keys`), validation with its messages
(:mod:`syshaxd.config.validate`) and the file helpers (:mod:`syshaxd.config.files`:
reading with line numbers, comment-keeping edits, atomic writes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from syshaxd.config.files import (
    ConfigError,
    atomic_write,
    dump_mapping,
    edited_text,
    key_lines,
    load_document,
    parse_text,
    parse_value,
    read_config_file,
    read_yaml_mapping,
    to_plain,
)
from syshaxd.config.flags import SECTION as FLAGS_SECTION
from syshaxd.config.flags import EngineFlags, flags_section, parse_engine_flags
from syshaxd.config.keys import KeyInfo, from_text, suggest
from syshaxd.config.model import (
    RUNTIME_KEYS,
    ConductorService,
    Config,
    Control,
    CpuService,
    Decider,
    DeviceService,
    Dialect,
    EngineEndpoint,
    EngineSpec,
    GpuService,
    Logging,
    ModelParams,
    Models,
    Monitor,
    PolicyName,
    Services,
    System,
    all_keys,
    engine_specs,
    iter_keys,
)
from syshaxd.config.validate import format_validation_error, prune_null_sections, validate
from syshaxd.locate import CONFIG_ENV, CONFIG_LOCATIONS, LocateError, find_config_file
from syshaxd.routing import Handoff

__all__ = [
    "RUNTIME_KEYS", "Config", "ConductorService", "Control", "CpuService", "Decider",
    "DeviceService", "Dialect", "EngineEndpoint", "EngineFlags", "EngineSpec", "GpuService", "Handoff",
    "Logging", "ModelParams", "Models", "Monitor", "PolicyName", "Services", "System",
    "all_keys", "engine_specs", "iter_keys", "ConfigError", "KeyInfo", "atomic_write",
    "read_yaml_mapping", "suggest", "load_document", "parse_scalar", "DEFAULT_LOCATIONS",
    "ENV_CONFIG", "ENV_PREFIX", "OVERRIDES_NAME", "LoadedConfig", "coerce_value",
    "default_state_dir", "display_value", "env_overrides", "find_config_path",
    "format_validation_error", "get_dotted", "load_config", "runtime_values",
    "save_overrides", "set_dotted", "set_in_file", "unknown_key_error", "validate",
]  # fmt: skip

DEFAULT_LOCATIONS: tuple[Path, ...] = CONFIG_LOCATIONS
ENV_CONFIG = CONFIG_ENV
ENV_PREFIX = "SYSHAX_"
OVERRIDES_NAME = "overrides.yaml"


def unknown_key_error(dotted: str, *, source: str | None = None, env: bool = False) -> ConfigError:
    """The error for a key that is not in the model, with the closest real key."""
    inside = [k for k in all_keys() if k.startswith(dotted + ".")]
    if inside:
        example = ENV_PREFIX + inside[0].upper().replace(".", "__") if env else inside[0]
        return ConfigError(
            f"{dotted!r} is a section, not a key; set its keys one by one, e.g. {example}",
            source=source,
            key=dotted,
        )
    hint = suggest(dotted, list(all_keys()))
    if hint and env:
        extra = f" (did you mean {ENV_PREFIX}{hint.upper().replace('.', '__')}?)"
    else:
        extra = f" (did you mean {hint!r}?)" if hint else ""
    return ConfigError(
        f"unknown key {dotted!r}{extra}; 'syshax config --help' lists every key",
        source=source,
        key=dotted,
    )


# ---------------------------------------------------------------------------------------
# Loading


@dataclass
class LoadedConfig:
    """A validated config plus where it came from."""

    config: Config
    path: Path | None
    overrides_path: Path | None = None
    #: dotted key -> "file PATH", "overrides PATH" or "env VAR" (absent: the default)
    sources: dict[str, str] = field(default_factory=dict)
    #: engine name -> its saved flags, from the overrides file (absent: enabled, not draining)
    engine_flags: dict[str, EngineFlags] = field(default_factory=dict)

    def source_of(self, key: str) -> str:
        """Where the effective value of ``key`` came from ("default" when no layer set it)."""
        return self.sources.get(key, "default")


def find_config_path(
    explicit: str | Path | None,
    env: Mapping[str, str] | None = None,
    locations: tuple[Path, ...] | None = None,
) -> Path | None:
    """The config file to use: ``--config``, then ``$SYSHAX_CONFIG``, then ``locations``.

    Returns None when nothing is found (defaults apply). A path given explicitly (option
    or variable) that does not exist is an error.
    """
    try:
        return find_config_file(explicit, env, DEFAULT_LOCATIONS if locations is None else locations)
    except LocateError as exc:
        raise ConfigError(exc.reason, source=str(exc.path)) from None


def env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE=24`` -> {"decider.cpu_max_batch_size": ("24", var)}."""
    out: dict[str, tuple[str, str]] = {}
    for var, raw in env.items():
        if not var.startswith(ENV_PREFIX) or "__" not in var:
            continue
        dotted = ".".join(part.lower() for part in var[len(ENV_PREFIX) :].split("__"))
        out[dotted] = (raw, var)
    return out


def _check_env_names(env: Mapping[str, str]) -> None:
    """A variable spelled with one underscore after the section would be silently ignored."""
    flat = {k.replace(".", "_"): k for k in all_keys()}
    for var in env:
        if (
            var.startswith(ENV_PREFIX)
            and "__" not in var
            and var[len(ENV_PREFIX) :].lower() in flat
        ):
            key = flat[var[len(ENV_PREFIX) :].lower()]
            right = ENV_PREFIX + key.upper().replace(".", "__")
            raise ConfigError(
                f"not a config override; did you mean {right}? (two underscores between the parts of {key!r})",
                source=f"environment variable {var}",
                key=key,
            )


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating sections as needed."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def get_dotted(config: BaseModel, dotted: str) -> Any:
    """Read ``a.b.c`` from a config model."""
    node: Any = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


#: Kept for callers that parse a value the way the file would.
parse_scalar = parse_value


def _deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the daemon keeps its overrides: $STATE_DIRECTORY (systemd), root's or the user's."""
    env = os.environ if env is None else env
    if env.get("STATE_DIRECTORY"):
        return Path(env["STATE_DIRECTORY"].split(":")[0])
    if os.geteuid() == 0:
        return Path("/var/lib/syshax")
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "syshax"


def load_config(
    explicit: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides_path: Path | None = None,
    use_overrides: bool = True,
    locations: tuple[Path, ...] | None = None,
) -> LoadedConfig:
    """Load the layered config: defaults, the YAML file, the overrides file, the environment.

    Args:
        explicit: the ``--config`` path, if given.
        env: environment to read (default ``os.environ``).
        overrides_path: the runtime overrides file (default: ``overrides.yaml`` in
            ``control.state_dir``, else in :func:`default_state_dir`).
        use_overrides: read the overrides file at all (the CLI's file edits do not).
        locations: where to look when neither ``explicit`` nor ``$SYSHAX_CONFIG`` names a
            file (default :data:`DEFAULT_LOCATIONS`).
    """
    env = os.environ if env is None else env
    path = find_config_path(explicit, env, locations)
    sources: dict[str, str] = {}
    origins: dict[str, str] = {}
    data: dict[str, Any] = {}
    if path is not None:
        data, lines = read_config_file(path)
        origins = {k: f"{path}:{n}" for k, n in lines.items()}
        validate(data, str(path), origins, warn_retired=True)  # report file mistakes against the file itself
        sources.update({k: f"file {path}" for k, _ in _flatten(data)})

    _check_env_names(env)
    from_env: dict[str, Any] = {}
    for dotted, (raw, var) in sorted(env_overrides(env).items()):
        if dotted not in all_keys():
            raise unknown_key_error(dotted, source=f"environment variable {var}", env=True)
        from_env[dotted] = coerce_value(dotted, raw)

    resolved_overrides: Path | None = None
    flags_data: Any = None
    flag_lines: dict[str, int] = {}
    if use_overrides:
        if overrides_path is None:
            state_dir = from_env.get("control.state_dir") or validate(data).control.state_dir
            overrides_path = Path(state_dir or default_state_dir(env)) / OVERRIDES_NAME
        resolved_overrides = overrides_path
        if overrides_path.is_file():
            over, lines = read_config_file(overrides_path)
            flags_data, flag_lines = over.pop(FLAGS_SECTION, None), lines
            over = prune_null_sections(over, Config)
            for key, _ in _flatten(over):
                if key not in RUNTIME_KEYS:
                    raise ConfigError(
                        f"{key!r} cannot be overridden at run time; only these keys may appear "
                        f"here: {', '.join(sorted(RUNTIME_KEYS))} (and engines.<name>.enabled/draining)",
                        source=f"{overrides_path}:{lines.get(key, 1)}",
                        key=key,
                    )
            data = _deep_merge(data, over)
            origins.update({k: f"{overrides_path}:{n}" for k, n in lines.items()})
            sources.update({k: f"overrides {overrides_path}" for k, _ in _flatten(over)})

    for dotted, value in from_env.items():
        var = env_overrides(env)[dotted][1]
        set_dotted(data, dotted, value)
        sources[dotted] = f"env {var}"
        origins[dotted] = f"environment variable {var}"
    config = validate(data, str(path) if path else None, origins)
    names = [spec.name for spec in engine_specs(config)]
    flags = parse_engine_flags(flags_data, flag_lines, str(resolved_overrides), names)
    return LoadedConfig(config, path, resolved_overrides, sources, engine_flags=flags)


# ---------------------------------------------------------------------------------------
# Editing and saving


def coerce_value(dotted: str, raw: Any) -> Any:
    """Convert a command-line or environment value for ``dotted`` to the key's type.

    Text that does not convert is passed on unchanged, so validation reports it with the
    key's allowed values. An unknown key raises ConfigError.
    """
    info = all_keys().get(dotted)
    if info is None:
        raise unknown_key_error(dotted)
    return from_text(info.annotation, raw) if isinstance(raw, str) else raw


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
    if read_back(text) != prune_null_sections(plain, Config):
        # Never write a file that would read back differently from what was validated.
        raise ConfigError(
            f"cannot represent {dotted}={raw!r} in {path} safely; file left unchanged"
        )
    atomic_write(path, text)
    return get_dotted(config, dotted)


def read_back(text: str) -> dict[str, Any]:
    """Parse file text the way :func:`load_config` will (for checking an edit)."""
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
