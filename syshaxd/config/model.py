"""The typed config model: every key of syshaxd's configuration, its type, default and meaning.

Import these names from :mod:`syshaxd.config`, which adds loading, validation messages
and editing on top. The key names and meanings follow sysHAX 0.2's config.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from syshaxd.config.apikeys import unknown_key_rule
from syshaxd.config.classes import ServiceLevels
from syshaxd.config.conductor import ConductorService, host_for_url
from syshaxd.config.keys import KeyInfo, allowed_text, type_name
from syshaxd.routing import Handoff

Dialect = Literal["vllm-v1", "vllm-v0", "llamacpp", "sglang", "openai"]
PolicyName = Literal["classic", "adaptive", "gpu-only", "cpu-only", "round-robin", "gpu-priority"]


SUN_PATH_MAX = 107  # Linux: sockaddr_un.sun_path is 108 bytes, one of them the NUL


class _Strict(BaseModel):
    # strict: YAML already has types, so "8001" (quoted) or true for a port is a mistake to
    # report, not to coerce. Path and secret fields opt out (they arrive as text).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


class EngineEndpoint(_Strict):
    """One more engine on a device, beside the service's main host and port."""

    EXAMPLE: ClassVar[str] = "{port: 8003}"

    name: str | None = Field(
        default=None, description="Name shown in the console (default: device + index)"
    )
    host: str = Field(default="127.0.0.1", description="Engine host")
    port: int = Field(ge=1, le=65535, description="Engine port")
    dialect: Dialect | None = Field(
        default=None, description="Engine dialect (default: the service's)"
    )


class DeviceService(_Strict):
    """A device's engines: the main endpoint (host/port) plus optional extra endpoints."""

    host: str = Field(default="127.0.0.1", description="Engine host")
    port: int = Field(default=8001, ge=1, le=65535, description="Engine port")
    name: str | None = Field(
        default=None, description="Name of the main engine in the console and logs"
    )
    dialect: Dialect = Field(default="vllm-v1", description="How the engine reports /metrics")
    handoff: Handoff = Field(
        default="recompute",
        description="Prefill/decode handoff protocol (the same on both devices)",
    )
    endpoints: list[EngineEndpoint] = Field(
        default_factory=list,
        description="Further engines on this device: [{name, host, port, dialect}]",
    )

    def url(self) -> str:
        """Base URL of the main engine."""
        return f"http://{host_for_url(self.host)}:{self.port}"


class GpuService(DeviceService):
    """The GPU engines (default port 8001, as in sysHAX's guide)."""

    port: int = Field(default=8001, ge=1, le=65535, description="Engine port")
    name: str | None = Field(default="gpu0", description="Name of the main engine in the console and logs")


class CpuService(DeviceService):
    """The CPU engines (default port 8002, as in sysHAX's guide)."""

    port: int = Field(default=8002, ge=1, le=65535, description="Engine port")
    name: str | None = Field(default="cpu0", description="Name of the main engine in the console and logs")
    cores: int | None = Field(default=None, ge=1, le=4096, description="Cores each CPU engine runs on, for the cost "
                              "of a request in CPU-core-seconds (null: this machine's)")


class Services(_Strict):
    """Where the engines listen and where the conductor listens."""

    gpu: GpuService = Field(default_factory=GpuService)
    cpu: CpuService = Field(default_factory=CpuService)
    conductor: ConductorService = Field(default_factory=ConductorService)

    @model_validator(mode="after")
    def _consistent(self) -> Services:
        if self.gpu.handoff != self.cpu.handoff:
            raise ValueError(
                f"services.gpu.handoff is {self.gpu.handoff!r} but services.cpu.handoff is "
                f"{self.cpu.handoff!r}: a prefill/decode pair needs the same protocol on both sides"
            )
        names = [spec.name for spec in _specs(self)]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(
                f"engine names must be unique; used more than once: {', '.join(dupes)}"
            )
        return self


class ModelParams(_Strict):
    """Generation parameters (sysHAX's models.params)."""

    max_tokens: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="max_tokens used when a request sets neither max_tokens nor max_completion_tokens",
    )
    temperature: float = Field(
        default=0.7,
        ge=0.0,
        le=2.0,
        description="Temperature of the startup test generation (requests are never rewritten)",
    )
    test_prompt: str = Field(default="Hello", description="Prompt of the startup test generation")
    test_tokens: int = Field(
        default=16, ge=1, le=4096, description="Tokens generated by the startup test"
    )


class Models(_Strict):
    """The served model."""

    default: str = Field(default="ds-32b", description="Model used when a request names none")
    params: ModelParams = Field(default_factory=ModelParams)


class System(_Strict):
    """Admission queue, timeouts and the graceful stop."""

    max_queue_size: int = Field(
        default=100, ge=0, le=1_000_000, description="Requests that may wait for capacity (429 when full)")
    request_timeout: float = Field(
        default=600.0, gt=0, le=86_400, description="Seconds a request may wait and run before 504"
    )
    shutdown_grace: float = Field(
        default=30.0, ge=0, le=3600, description="Seconds in-flight requests may finish after SIGTERM")
    drain_notice: float = Field(
        default=0.0, ge=0, le=600, description="Seconds a draining box still serves new requests after /health "
        "turned 503, so a cluster router notices before the port closes (docs/fleet.md)")


class Decider(_Strict):
    """The scheduling policy and its limits (all changeable at run time)."""

    policy: PolicyName = Field(default="adaptive", description="Scheduling policy")
    max_num_seqs: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="GPU batch limit used by classic when gpu_max_batch_size is unset (sysHAX 0.2)",
    )
    gpu_max_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Requests the GPU may run at once before work moves to the CPU",
    )
    cpu_max_batch_size: int = Field(
        default=20,
        ge=0,
        le=4096,
        description="Requests the CPU may run at once (0 = never use the CPU)",
    )
    gpu_cache_threshold: float = Field(
        default=90.0,
        ge=0,
        le=100,
        description="GPU KV-cache usage, in percent, above which work moves to the CPU",
    )
    cpu_throughput_threshold: float = Field(
        default=2.0,
        ge=0,
        le=1_000_000,
        description="CPU decode tokens/s below which a busy CPU takes no more work",
    )
    token_limit_multiplier: float = Field(
        default=10.0,
        gt=0,
        le=10_000,
        description="CPU token limit = CPU tokens/s x this, rounded to tens",
    )
    token_limit_min: int = Field(
        default=50, ge=1, le=1_000_000, description="Smallest CPU token limit"
    )
    token_limit_max: int = Field(
        default=1000, ge=1, le=1_000_000, description="Largest CPU token limit"
    )
    auto_pd_offload: bool = Field(
        default=False, description="Turn CPU decisions into GPU prefill + CPU decode"
    )
    ttft_target: float = Field(
        default=5.0, gt=0, le=3600, description="adaptive: time-to-first-token target in seconds"
    )
    tpot_target: float = Field(
        default=0.2, gt=0, le=60, description="adaptive: time-per-output-token target in seconds"
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
    """How often and how patiently the engines are watched."""

    interval: float = Field(
        default=1.0, ge=0.05, le=3600, description="Seconds between engine scrapes"
    )
    idle_interval: float = Field(
        default=5.0, ge=0, le=3600,
        description="Seconds between scrapes while no request runs or waits and no console watches "
                    "(0: always monitor.interval)",
    )
    scrape_timeout: float = Field(
        default=2.0, gt=0, le=600, description="Seconds one scrape may take"
    )
    stale_after: int = Field(
        default=2, ge=1, le=1000, description="Missed scrapes before an engine is stale"
    )
    down_after: int = Field(
        default=5, ge=1, le=1000,
        description="Missed scrapes before an engine is down (one still streaming answers stays stale)"
    )
    startup_check: bool = Field(
        default=True, description="Probe every engine at start and run a short test generation"
    )

    @model_validator(mode="after")
    def _stale_before_down(self) -> Monitor:
        if self.down_after < self.stale_after:
            raise ValueError(
                f"monitor.down_after ({self.down_after}) is below monitor.stale_after "
                f"({self.stale_after}): an engine goes stale before it goes down"
            )
        return self


class Control(_Strict):
    """The control socket (console, syshax status/set) and where runtime changes are kept."""

    socket: Path | None = Field(default=None, strict=False, description="Control socket path (default "
                                "/run/syshax/control.sock, or under $XDG_RUNTIME_DIR for non-root)")
    group: str = Field(default="syshax", description="Group whose members may read the control socket")
    admin_group: str | None = Field(default=None, description="Group whose members may also change the running daemon")
    state_dir: Path | None = Field(default=None, strict=False, description="Where runtime overrides are saved "
                                   "(default /var/lib/syshax, or $STATE_DIRECTORY)")

    @field_validator("socket")
    @classmethod
    def _fits_sun_path(cls, value: Path | None) -> Path | None:
        if value is not None and len(bytes(value)) > SUN_PATH_MAX:
            raise ValueError(
                f"control.socket is {len(bytes(value))} bytes long; a Unix socket path can be at most "
                f"{SUN_PATH_MAX} bytes (choose a shorter directory)"
            )
        return value


class Logging(_Strict):
    """Logging."""

    level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Log level; prompt text is only logged at debug"
    )
    requests_kept: int = Field(default=2000, ge=0, le=1_000_000, description="Finished requests the daemon keeps "
                               "in memory for the console's requests view and `syshax advise` (never prompt text)")
    requests_file: Path | None = Field(default=None, strict=False, description="Also append every finished request "
                                       "as a JSON line here (rotated; never prompt text); null: memory only")
    requests_file_bytes: int = Field(default=64 * 1024**2, ge=4096, description="Size at which requests_file rotates")
    requests_file_backups: int = Field(default=5, ge=1, le=100, description="Rotated requests files kept")
    otlp_endpoint: str | None = Field(default=None, description="OTLP/HTTP traces URL (e.g. "
                                      "http://collector:4318/v1/traces): one span per request; null: no tracing")


class Config(_Strict):
    """The whole configuration of syshaxd."""

    services: Services = Field(default_factory=Services)
    models: Models = Field(default_factory=Models)
    system: System = Field(default_factory=System)
    decider: Decider = Field(default_factory=Decider)
    monitor: Monitor = Field(default_factory=Monitor)
    control: Control = Field(default_factory=Control)
    logging: Logging = Field(default_factory=Logging)
    service: ServiceLevels = Field(default_factory=ServiceLevels)

    @model_validator(mode="after")
    def _rules_name_keys(self) -> Config:
        why = unknown_key_rule(self.service, self.services.conductor.named_keys())
        if why is not None:
            raise ValueError(why)
        return self


#: Keys the running daemon may change without a restart (PATCH /v1/config, `syshax set`).
RUNTIME_KEYS: frozenset[str] = frozenset(f"decider.{name}" for name in Decider.model_fields) | frozenset(
    f"service.{name}" for name in ServiceLevels.model_fields) | {
    "monitor.interval",
    "logging.level",
}


def iter_keys(model: type[BaseModel] = Config, prefix: str = "") -> Iterator[KeyInfo]:
    """Yield every leaf key of ``model`` with its type, default, description and allowed values."""
    for name, info in model.model_fields.items():
        tp = info.annotation
        dotted = f"{prefix}{name}"
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            yield from iter_keys(tp, dotted + ".")
            continue
        default = info.get_default(call_default_factory=True)
        yield KeyInfo(
            dotted, type_name(tp), default, info.description or "", tp, allowed_text(tp, info)
        )


def all_keys() -> dict[str, KeyInfo]:
    """All leaf keys by dotted name."""
    return {k.key: k for k in iter_keys()}


@dataclass(frozen=True)
class EngineSpec:
    """One configured engine, resolved: its name, device, base URL and dialect."""

    name: str
    device: Literal["gpu", "cpu"]
    url: str
    dialect: Dialect
    handoff: Handoff


def _specs(services: Services) -> list[EngineSpec]:
    specs: list[EngineSpec] = []
    for device in ("gpu", "cpu"):
        service: DeviceService = getattr(services, device)
        specs.append(EngineSpec(service.name or f"{device}0", device, service.url(), service.dialect, service.handoff))
        for index, extra in enumerate(service.endpoints, start=1):
            url = f"http://{host_for_url(extra.host)}:{extra.port}"
            specs.append(EngineSpec(extra.name or f"{device}{index}", device, url, extra.dialect or service.dialect,
                                    service.handoff))
    return specs


def engine_specs(config: Config) -> list[EngineSpec]:
    """Every configured engine, GPU engines first, each with a unique name (checked on load)."""
    return _specs(config.services)
