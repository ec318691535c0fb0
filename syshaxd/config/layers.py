"""Layered loading: built-in defaults, the admin's YAML file, the overrides file, the environment.

The layers, lowest first: built-in defaults, the administrator's YAML file, the daemon's
runtime overrides file (in its state directory), then ``SYSHAX_SECTION__KEY`` environment
variables. Every user mistake becomes a :class:`~syshaxd.config.files.ConfigError` whose
message names the file and line (or the variable), the dotted key, the bad value and what
is allowed. :func:`load_config` says where each effective value came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syshaxd.config.dotted import deep_merge, flatten, set_dotted
from syshaxd.config.files import ConfigError, read_config_file
from syshaxd.config.flags import FLAGS_SECTION, EngineFlags, parse_engine_flags
from syshaxd.config.keys import from_text, suggest
from syshaxd.config.model import RUNTIME_KEYS, Config, all_keys, engine_specs
from syshaxd.config.validate import prune_null_sections, validate
from syshaxd.locate import LocateError, find_config_file

#: Environment variables that override a key start with this: ``SYSHAX_SECTION__KEY``.
ENV_PREFIX = "SYSHAX_"
#: The overrides file's name in the daemon's state directory.
OVERRIDES_NAME = "overrides.yaml"


def env_var(key: str) -> str:
    """The environment variable that overrides ``key``: ``SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE``."""
    return ENV_PREFIX + key.upper().replace(".", "__")


def unknown_key_error(dotted: str, *, source: str | None = None, env: bool = False) -> ConfigError:
    """The error for a key that is not in the model, with the closest real key."""
    inside = [k for k in all_keys() if k.startswith(dotted + ".")]
    if inside:
        example = env_var(inside[0]) if env else inside[0]
        return ConfigError(
            f"{dotted!r} is a section, not a key; set its keys one by one, e.g. {example}",
            source=source,
            key=dotted,
        )
    hint = suggest(dotted, list(all_keys()))
    if hint and env:
        extra = f" (did you mean {env_var(hint)}?)"
    else:
        extra = f" (did you mean {hint!r}?)" if hint else ""
    return ConfigError(
        f"unknown key {dotted!r}{extra}; 'syshax config --help' lists every key",
        source=source,
        key=dotted,
    )


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
        return find_config_file(explicit, env, locations)
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
            right = env_var(key)
            raise ConfigError(
                f"not a config override; did you mean {right}? (two underscores between the parts of {key!r})",
                source=f"environment variable {var}",
                key=key,
            )


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
            file (default :data:`syshaxd.locate.CONFIG_LOCATIONS`).
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
        sources.update({k: f"file {path}" for k, _ in flatten(data)})

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
            for key, _ in flatten(over):
                if key not in RUNTIME_KEYS:
                    raise ConfigError(
                        f"{key!r} cannot be overridden at run time; only these keys may appear "
                        f"here: {', '.join(sorted(RUNTIME_KEYS))} (and engines.<name>.enabled/draining)",
                        source=f"{overrides_path}:{lines.get(key, 1)}",
                        key=key,
                    )
            data = deep_merge(data, over)
            origins.update({k: f"{overrides_path}:{n}" for k, n in lines.items()})
            sources.update({k: f"overrides {overrides_path}" for k, _ in flatten(over)})

    for dotted, value in from_env.items():
        var = env_overrides(env)[dotted][1]
        set_dotted(data, dotted, value)
        sources[dotted] = f"env {var}"
        origins[dotted] = f"environment variable {var}"
    config = validate(data, str(path) if path else None, origins)
    names = [spec.name for spec in engine_specs(config)]
    flags = parse_engine_flags(flags_data, flag_lines, str(resolved_overrides), names)
    return LoadedConfig(config, path, resolved_overrides, sources, engine_flags=flags)


def coerce_value(dotted: str, raw: Any) -> Any:
    """Convert a command-line or environment value for ``dotted`` to the key's type.

    Text that does not convert is passed on unchanged, so validation reports it with the
    key's allowed values. An unknown key raises ConfigError.
    """
    info = all_keys().get(dotted)
    if info is None:
        raise unknown_key_error(dotted)
    return from_text(info.annotation, raw) if isinstance(raw, str) else raw
