"""Typed configuration: the pydantic model, layered loading, overrides and atomic saving.

The layers, lowest first: built-in defaults, the administrator's YAML file, the daemon's
runtime overrides file (in its state directory), then ``SYSHAX_SECTION__KEY`` environment
variables. Every user mistake becomes a :class:`ConfigError` whose message names the
file, the dotted key, the bad value and what is allowed.
"""

from __future__ import annotations

import difflib
import os
import tempfile
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

Dialect = Literal["vllm-v1", "vllm-v0", "llamacpp", "sglang", "openai"]
Handoff = Literal["syshax", "kv-transfer", "llamacpp-slots", "recompute"]
PolicyName = Literal["classic", "adaptive", "gpu-only", "cpu-only", "round-robin"]

DEFAULT_LOCATIONS: tuple[Path, ...] = (
    Path("/etc/syshax/config.yaml"),
    Path("config/config.yaml"),
)
ENV_CONFIG = "SYSHAX_CONFIG"
ENV_PREFIX = "SYSHAX_"
OVERRIDES_NAME = "overrides.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EngineEndpoint(_Strict):
    """One more engine on a device, beside the service's main host and port."""

    name: str | None = Field(None, description="Name shown in the console (default: device + index)")
    host: str = Field("127.0.0.1", description="Engine host")
    port: int = Field(..., ge=1, le=65535, description="Engine port")
    dialect: Dialect | None = Field(None, description="Engine dialect (default: the service's)")


class DeviceService(_Strict):
    """A device's engines: the main endpoint (host/port) plus optional extra endpoints."""

    host: str = Field("127.0.0.1", description="Engine host")
    port: int = Field(8001, ge=1, le=65535, description="Engine port")
    name: str | None = Field(None, description="Name of the main engine (default: gpu0 / cpu0)")
    dialect: Dialect = Field(
        "vllm-v1", description="How the engine reports /metrics: vllm-v1, vllm-v0, llamacpp, sglang, openai"
    )
    handoff: Handoff = Field(
        "recompute",
        description="Prefill/decode handoff protocol: syshax, kv-transfer, llamacpp-slots, recompute",
    )
    endpoints: list[EngineEndpoint] = Field(
        default_factory=list, description="Further engines on this device (list of {name, host, port, dialect})"
    )

    def url(self) -> str:
        """Base URL of the main engine."""
        return f"http://{_host_for_url(self.host)}:{self.port}"


class GpuService(DeviceService):
    """The GPU engines (default port 8001, as in sysHAX's guide)."""

    port: int = Field(8001, ge=1, le=65535, description="Engine port")


class CpuService(DeviceService):
    """The CPU engines (default port 8002, as in sysHAX's guide)."""

    port: int = Field(8002, ge=1, le=65535, description="Engine port")


class ConductorService(_Strict):
    """The conductor's own OpenAI-compatible HTTP API."""

    host: str = Field("127.0.0.1", description="Bind address of the OpenAI API (127.0.0.1 = local only)")
    port: int = Field(8010, ge=1, le=65535, description="Port of the OpenAI API")
    api_key: SecretStr | None = Field(
        None, description="If set, clients must send 'Authorization: Bearer <key>'"
    )
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, le=1024**3, description="Largest request body accepted (413 above)"
    )

    def url(self) -> str:
        """Base URL clients use to reach the conductor."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{_host_for_url(host)}:{self.port}"


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Services(_Strict):
    gpu: GpuService = Field(default_factory=GpuService)
    cpu: CpuService = Field(default_factory=CpuService)
    conductor: ConductorService = Field(default_factory=ConductorService)

    @model_validator(mode="after")
    def _one_handoff(self) -> Services:
        if self.gpu.handoff != self.cpu.handoff:
            raise ValueError(
                f"services.gpu.handoff is {self.gpu.handoff!r} but services.cpu.handoff is "
                f"{self.cpu.handoff!r}: a prefill/decode pair needs the same protocol on both sides"
            )
        return self


class ModelParams(_Strict):
    max_tokens: int = Field(
        1024, ge=1, le=1_000_000, description="max_tokens used when a request sets neither max_tokens nor max_completion_tokens"
    )
    temperature: float = Field(
        0.7, ge=0.0, le=2.0, description="Temperature of the startup test generation (requests are never rewritten)"
    )
    test_prompt: str = Field("Hello", description="Prompt of the startup test generation")
    test_tokens: int = Field(16, ge=1, le=4096, description="Tokens generated by the startup test")


class Models(_Strict):
    default: str = Field("ds-32b", description="Model used when a request names none")
    params: ModelParams = Field(default_factory=ModelParams)


class System(_Strict):
    max_queue_size: int = Field(
        100, ge=0, le=1_000_000, description="Requests that may wait for capacity (429 when full)"
    )
    request_timeout: float = Field(
        600.0, gt=0, le=86_400, description="Seconds a request may wait and run before 504"
    )
    shutdown_grace: float = Field(
        30.0, ge=0, le=3600, description="Seconds in-flight requests may finish after SIGTERM"
    )


class Decider(_Strict):
    policy: PolicyName = Field(
        "adaptive", description="Scheduling policy: adaptive, classic, gpu-only, cpu-only, round-robin"
    )
    max_num_seqs: int = Field(
        16, ge=1, le=4096, description="GPU batch limit used by classic when gpu_max_batch_size is unset (sysHAX 0.2)"
    )
    gpu_max_batch_size: int | None = Field(
        None, ge=1, le=4096, description="Requests the GPU may run at once before work moves to the CPU"
    )
    cpu_max_batch_size: int = Field(
        20, ge=0, le=4096, description="Requests the CPU may run at once (0 = never use the CPU)"
    )
    gpu_cache_threshold: float = Field(
        90.0, ge=0, le=100, description="GPU KV-cache usage, in percent, above which work moves to the CPU"
    )
    cpu_throughput_threshold: float = Field(
        2.0, ge=0, le=1_000_000, description="CPU decode tokens/s below which a busy CPU takes no more work"
    )
    token_limit_multiplier: float = Field(
        10.0, gt=0, le=10_000, description="CPU token limit = CPU tokens/s x this, rounded to tens"
    )
    token_limit_min: int = Field(50, ge=1, le=1_000_000, description="Smallest CPU token limit")
    token_limit_max: int = Field(1000, ge=1, le=1_000_000, description="Largest CPU token limit")
    auto_pd_offload: bool = Field(
        False, description="Turn CPU decisions into GPU prefill + CPU decode"
    )
    ttft_target: float = Field(
        5.0, gt=0, le=3600, description="adaptive: time-to-first-token target in seconds"
    )
    tpot_target: float = Field(
        0.2, gt=0, le=60, description="adaptive: time-per-output-token target in seconds"
    )

    @model_validator(mode="after")
    def _limits_ordered(self) -> Decider:
        if self.token_limit_min > self.token_limit_max:
            raise ValueError(
                f"decider.token_limit_min ({self.token_limit_min}) is above "
                f"decider.token_limit_max ({self.token_limit_max})"
            )
        return self


class Monitor(_Strict):
    interval: float = Field(1.0, ge=0.05, le=3600, description="Seconds between engine scrapes")
    scrape_timeout: float = Field(2.0, gt=0, le=600, description="Seconds one scrape may take")
    stale_after: int = Field(2, ge=1, le=1000, description="Missed scrapes before an engine is stale")
    down_after: int = Field(5, ge=1, le=1000, description="Missed scrapes before an engine is down")
    startup_check: bool = Field(
        True, description="Probe every engine at start and run a short test generation"
    )


class Control(_Strict):
    socket: Path | None = Field(
        None,
        description="Control socket path (default /run/syshax/control.sock, or under $XDG_RUNTIME_DIR for non-root)",
    )
    group: str = Field("syshax", description="Group whose members may read the control socket")
    admin_group: str | None = Field(
        None, description="Group whose members may also change the running daemon"
    )
    state_dir: Path | None = Field(
        None, description="Where runtime overrides are saved (default /var/lib/syshax, or $STATE_DIRECTORY)"
    )


class Logging(_Strict):
    level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level; prompt text is only logged at debug"
    )


class Config(_Strict):
    """The whole configuration of syshaxd."""

    services: Services = Field(default_factory=Services)
    models: Models = Field(default_factory=Models)
    system: System = Field(default_factory=System)
    decider: Decider = Field(default_factory=Decider)
    monitor: Monitor = Field(default_factory=Monitor)
    control: Control = Field(default_factory=Control)
    logging: Logging = Field(default_factory=Logging)


#: Keys the running daemon may change without a restart (PATCH /v1/config, `syshax set`).
RUNTIME_KEYS: frozenset[str] = frozenset(
    f"decider.{name}" for name in Decider.model_fields
) | {"monitor.interval", "logging.level"}


class ConfigError(Exception):
    """A configuration mistake, with a message written for the operator."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        super().__init__(f"{source}: {message}" if source else message)


# ---------------------------------------------------------------------------------------
# Describing keys


@dataclass(frozen=True)
class KeyInfo:
    """One leaf key of the configuration."""

    key: str
    type_name: str
    default: Any
    description: str
    annotation: Any


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        (inner,) = get_args(tp) or (Any,)
        return f"list[{_type_name(inner) if not _is_model(inner) else 'endpoint'}]"
    if tp is type(None):
        return "null"
    if tp is SecretStr:
        return "secret"
    return getattr(tp, "__name__", str(tp))


def iter_keys(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[KeyInfo]:
    """Yield every leaf key of ``model`` with its type, default and description."""
    for name, info in model.model_fields.items():
        tp = info.annotation
        dotted = f"{prefix}{name}"
        if _is_model(tp):
            yield from iter_keys(typing.cast(type[BaseModel], tp), dotted + ".")
            continue
        default = info.get_default(call_default_factory=True)
        yield KeyInfo(dotted, _type_name(tp), default, info.description or "", tp)


def all_keys() -> dict[str, KeyInfo]:
    """All leaf keys by dotted name."""
    return {k.key: k for k in iter_keys()}


def _section_fields(path: tuple[str | int, ...]) -> list[str]:
    """Field names allowed at a nested location (for "did you mean")."""
    model: Any = Config
    for part in path:
        if isinstance(part, int):
            continue
        field_info = model.model_fields.get(part) if _is_model(model) else None
        if field_info is None:
            return []
        tp = field_info.annotation
        if get_origin(tp) is list:
            tp = get_args(tp)[0]
        model = tp
    return list(model.model_fields) if _is_model(model) else []


def suggest(word: str, choices: list[str]) -> str | None:
    """The closest choice to ``word``, if any is close."""
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None


# ---------------------------------------------------------------------------------------
# Loading


@dataclass
class LoadedConfig:
    """A validated config plus where it came from."""

    config: Config
    path: Path | None
    overrides_path: Path | None = None
    sources: dict[str, str] = field(default_factory=dict)


def find_config_path(explicit: str | Path | None, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file to use: ``--config``, then ``$SYSHAX_CONFIG``, then the default locations.

    Returns None when nothing is found (defaults apply). An explicit path that does not
    exist is an error.
    """
    env = os.environ if env is None else env
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path} (given with --config)")
        return path
    if env.get(ENV_CONFIG):
        path = Path(env[ENV_CONFIG])
        if not path.is_file():
            raise ConfigError(f"config file not found: {path} (from ${ENV_CONFIG})")
        return path
    for candidate in DEFAULT_LOCATIONS:
        if candidate.is_file():
            return candidate
    return None


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (an empty file is an empty mapping)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file: {exc.strerror or exc}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file is not UTF-8 text ({exc.reason})", source=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML: {where}{problem}", source=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level must be a mapping of sections (services, models, ...), not {type(data).__name__}",
            source=str(path),
        )
    return data


def env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``SYSHAX_DECIDER__CPU_MAX_BATCH_SIZE=24`` -> {"decider.cpu_max_batch_size": ("24", var)}."""
    out: dict[str, tuple[str, str]] = {}
    for var, raw in env.items():
        if not var.startswith(ENV_PREFIX) or "__" not in var:
            continue
        dotted = ".".join(part.lower() for part in var[len(ENV_PREFIX) :].split("__"))
        out[dotted] = (raw, var)
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
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


def parse_scalar(raw: str) -> Any:
    """Parse a command-line or environment value the way YAML would (``24``, ``true``, ``null``)."""
    try:
        return yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def format_validation_error(exc: ValidationError, data: Mapping[str, Any], source: str | None) -> ConfigError:
    """Turn pydantic's error into one operator-facing message (all problems, one per line)."""
    lines = []
    first_key: str | None = None
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        first_key = first_key or dotted
        if err["type"] == "extra_forbidden":
            parent, name = loc[:-1], str(loc[-1])
            allowed = _section_fields(parent)
            hint = suggest(name, allowed)
            section = ".".join(str(p) for p in parent) or "the top level"
            msg = f"unknown key {dotted!r}"
            msg += f" (did you mean {'.'.join([*map(str, parent), hint])!r}?)" if hint else ""
            msg += f"; allowed in {section}: {', '.join(allowed)}" if allowed else ""
            lines.append(msg)
            continue
        value = err.get("input")
        reason = err["msg"]
        if reason.startswith("Value error, "):
            reason = reason[len("Value error, ") :]
        if err["type"] in ("model_type", "model_attributes_type", "dict_type") or isinstance(value, dict):
            lines.append(f"{dotted}: {reason}")
        else:
            lines.append(f"{dotted}: invalid value {value!r}: {reason}")
    message = lines[0] if len(lines) == 1 else "invalid configuration:\n  " + "\n  ".join(lines)
    return ConfigError(message, source=source, key=first_key)


def validate(data: Mapping[str, Any], source: str | None = None) -> Config:
    """Validate a raw mapping into a :class:`Config`, or raise :class:`ConfigError`."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(exc, data, source) from None


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
) -> LoadedConfig:
    """Load the layered config: defaults, the YAML file, the overrides file, the environment.

    Args:
        explicit: the ``--config`` path, if given.
        env: environment to read (default ``os.environ``).
        overrides_path: the runtime overrides file (default: ``overrides.yaml`` in the
            state directory named by the file, else the default state directory).
        use_overrides: read the overrides file at all (the CLI's file edits do not).
    """
    env = os.environ if env is None else env
    path = find_config_path(explicit, env)
    sources: dict[str, str] = {}
    data: dict[str, Any] = {}
    if path is not None:
        data = read_yaml_mapping(path)
        validate(data, str(path))  # report file mistakes against the file itself
        sources.update({k: f"file {path}" for k, _ in _flatten(data)})

    resolved_overrides: Path | None = None
    if use_overrides:
        if overrides_path is None:
            state_dir = validate(data).control.state_dir or default_state_dir(env)
            overrides_path = Path(state_dir) / OVERRIDES_NAME
        resolved_overrides = overrides_path
        if overrides_path.is_file():
            over = read_yaml_mapping(overrides_path)
            for key, _ in _flatten(over):
                if key not in RUNTIME_KEYS:
                    raise ConfigError(
                        f"{key!r} cannot be overridden at run time; only runtime keys may appear here",
                        source=str(overrides_path),
                        key=key,
                    )
            data = _deep_merge(data, over)
            validate(data, f"{overrides_path} (on top of {path or 'the defaults'})")
            sources.update({k: f"overrides {overrides_path}" for k, _ in _flatten(over)})

    known = all_keys()
    for dotted, (raw, var) in sorted(env_overrides(env).items()):
        if dotted not in known and not any(k.startswith(dotted + ".") for k in known):
            hint = suggest(dotted, list(known))
            extra = f" (did you mean {ENV_PREFIX}{hint.upper().replace('.', '__')}?)" if hint else ""
            raise ConfigError(f"unknown key {dotted!r}{extra}", source=f"environment variable {var}", key=dotted)
        set_dotted(data, dotted, parse_scalar(raw))
        sources[dotted] = f"env {var}"
    config = validate(data, "the environment" if env_overrides(env) else str(path) if path else None)
    return LoadedConfig(config=config, path=path, overrides_path=resolved_overrides, sources=sources)


# ---------------------------------------------------------------------------------------
# Saving


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new file.

    A temporary file in the same directory is written, flushed and fsynced, then renamed
    over the target; the directory is fsynced so the rename itself is durable.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def coerce_value(dotted: str, raw: str | Any) -> Any:
    """Convert a command-line value for ``dotted`` to the key's type, or raise ConfigError."""
    known = all_keys()
    if dotted not in known:
        hint = suggest(dotted, list(known))
        extra = f" (did you mean {hint!r}?)" if hint else ""
        raise ConfigError(f"unknown key {dotted!r}{extra}; 'syshax config --help' lists every key", key=dotted)
    value = parse_scalar(raw) if isinstance(raw, str) else raw
    info = known[dotted]
    # A string-typed key keeps the literal text ("007" stays "007", "yes" stays "yes").
    if isinstance(raw, str) and info.type_name in ("str", "str | null", "Path | null", "secret | null"):
        value = None if raw == "null" and "null" in info.type_name else raw
    return value


def set_in_file(path: Path, dotted: str, raw: str) -> Any:
    """Set one key in a YAML config file, keeping its comments, validated, written atomically.

    Returns the converted value. Raises ConfigError for an unknown key or a bad value;
    the file is unchanged then.
    """
    from ruamel.yaml import YAML  # only the CLI's file edits need the round-trip loader

    value = coerce_value(dotted, raw)
    rt = YAML()
    rt.preserve_quotes = True
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        doc = rt.load(text) if text.strip() else None
    except Exception as exc:  # ruamel raises many error types for bad YAML
        raise ConfigError(f"invalid YAML: {exc}", source=str(path)) from None
    if doc is None:
        from ruamel.yaml.comments import CommentedMap

        doc = CommentedMap()
    plain = read_yaml_mapping(path) if text.strip() else {}
    set_dotted(plain, dotted, value)
    config = validate(plain, str(path))
    node = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        if part not in node or node[part] is None:
            from ruamel.yaml.comments import CommentedMap

            node[part] = CommentedMap()
        node = node[part]
    node[parts[-1]] = value
    import io

    out = io.StringIO()
    rt.dump(doc, out)
    atomic_write(path, out.getvalue())
    return get_dotted(config, dotted)


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


def save_overrides(path: Path, values: Mapping[str, Any]) -> None:
    """Write runtime overrides (dotted keys) as nested YAML, atomically."""
    nested: dict[str, Any] = {}
    for key, value in sorted(values.items()):
        if key not in RUNTIME_KEYS:
            raise ConfigError(f"{key!r} is not a runtime key", key=key)
        set_dotted(nested, key, value)
    header = "# Runtime overrides written by syshaxd (syshax save). The admin's YAML file stays untouched.\n"
    atomic_write(path, header + yaml.safe_dump(nested, sort_keys=True), mode=0o640)


def display_value(value: Any) -> str:
    """A value as the CLI prints it (YAML-ish scalars, secrets masked)."""
    value = _plain(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


@dataclass(frozen=True)
class EngineSpec:
    """One configured engine, resolved: its name, device, base URL and dialect."""

    name: str
    device: Literal["gpu", "cpu"]
    url: str
    dialect: Dialect
    handoff: Handoff


def engine_specs(config: Config) -> list[EngineSpec]:
    """Every configured engine, GPU engines first, each with a unique name."""
    specs: list[EngineSpec] = []
    for device in ("gpu", "cpu"):
        service: DeviceService = getattr(config.services, device)
        specs.append(
            EngineSpec(service.name or f"{device}0", device, service.url(), service.dialect, service.handoff)
        )
        for index, extra in enumerate(service.endpoints, start=1):
            url = f"http://{_host_for_url(extra.host)}:{extra.port}"
            specs.append(
                EngineSpec(extra.name or f"{device}{index}", device, url, extra.dialect or service.dialect, service.handoff)
            )
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"engine names must be unique; used more than once: {', '.join(dupes)}")
    return specs
