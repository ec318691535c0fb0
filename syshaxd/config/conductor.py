"""The conductor's own API port (``services.conductor``): where it listens, the keys clients
send, how many processes serve it and what one client may hold (:mod:`syshaxd.config.edge`).

The keys' rules (names, one name per secret, ``api_key`` as the key named ``default``) are in
:mod:`syshaxd.config.apikeys`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from syshaxd.config.apikeys import keys_shape, named_keys, secret_text
from syshaxd.config.edge import EdgeLimits


class ConductorService(BaseModel):
    """The conductor's own OpenAI-compatible HTTP API."""

    # As every config section: YAML has types, so a quoted port is a mistake to report; the
    # secrets opt out (they arrive as text).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    host: str = Field(default="127.0.0.1", description="Bind address of the OpenAI API (127.0.0.1 = local only)")
    port: int = Field(default=8010, ge=1, le=65535, description="Port of the OpenAI API")
    api_key: SecretStr | None = Field(default=None, strict=False, description="A key clients may send as "
                                      "'Authorization: Bearer <key>': the key named 'default'")
    api_keys: dict[str, SecretStr] = Field(default_factory=dict, strict=False, description="Named keys, "
                                           "{name: secret}; with any key set, every request needs one")
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1024**3,
                                description="Largest request body accepted (413 above)")
    workers: int = Field(
        default=1, ge=1, le=64,
        description="Processes serving the API port: 1 is the daemon alone; each further worker "
        "relays on its own core while the daemon keeps the one set of books (see docs/architecture.md)",
    )
    load_format: Literal["vllm-router", "sglang"] = Field(
        default="vllm-router", description="Shape of GET /get_load: vllm-router's {\"load\": N} or the SGLang "
        "gateway's list per data-parallel rank (docs/fleet.md)")
    limits: EdgeLimits = Field(default_factory=EdgeLimits)

    @field_validator("api_key", "api_keys", mode="before")
    @classmethod
    def _secrets(cls, value: Any, info: ValidationInfo) -> Any:
        return keys_shape(value) if info.field_name == "api_keys" else secret_text(value, "services.conductor.api_key")

    @model_validator(mode="after")
    def _one_name_per_secret(self) -> ConductorService:
        self.named_keys()
        return self

    def named_keys(self) -> dict[str, SecretStr]:
        """Every API key by name (``api_key`` is the one named ``default``)."""
        return named_keys(self.api_key, self.api_keys)

    def url(self) -> str:
        """Base URL clients use to reach the conductor."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host_for_url(host)}:{self.port}"


def host_for_url(host: str) -> str:
    """``host`` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
