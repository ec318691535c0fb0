"""Configuration: the typed model, layered loading, file edits and the running daemon's values.

Other packages import from here. One module per idea: the model and its keys (``model``,
``keys``), validation with operator-facing messages (``validate``), YAML files on disk
(``files``), dotted keys (``dotted``), loading the layers (``layers``), editing the admin's
file and saving overrides (``edits``), engine flags (``flags``), the API port (``conductor``),
its keys (``apikeys``) and edge limits (``edge``), and the running config (``runtime``).
"""

from __future__ import annotations

from syshaxd.config.classes import (
    ClassRule,
    RequestFields,
    ServiceClass,
    ServiceLevels,
    classify,
    reachable,
)
from syshaxd.config.conductor import ConductorService
from syshaxd.config.dotted import get_dotted
from syshaxd.config.edge import EdgeLimits
from syshaxd.config.edits import display_value, save_overrides, set_in_file
from syshaxd.config.files import ConfigError, atomic_write, parse_value
from syshaxd.config.flags import EngineFlags
from syshaxd.config.keys import KeyInfo, suggest
from syshaxd.config.layers import (
    LoadedConfig,
    coerce_value,
    env_var,
    find_config_path,
    load_config,
    unknown_key_error,
)
from syshaxd.config.model import (
    RUNTIME_KEYS,
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
from syshaxd.config.runtime import UNSAVED, PatchError, RuntimeConfig, limits_of
from syshaxd.config.validate import validate
from syshaxd.routing import Handoff

__all__ = [
    "ClassRule", "RequestFields", "ServiceClass", "ServiceLevels", "classify", "reachable",
    "RUNTIME_KEYS", "UNSAVED",
    "ConductorService", "Config", "ConfigError", "Control", "CpuService", "Decider", "DeviceService", "Dialect",
    "EdgeLimits", "EngineEndpoint", "EngineFlags", "EngineSpec", "GpuService", "Handoff", "KeyInfo", "LoadedConfig",
    "Logging",
    "ModelParams", "Models", "Monitor", "PatchError", "PolicyName", "RuntimeConfig", "Services", "System",
    "all_keys", "atomic_write", "coerce_value", "display_value", "engine_specs", "env_var", "find_config_path",
    "get_dotted", "iter_keys", "limits_of", "load_config", "parse_value", "save_overrides", "set_in_file",
    "suggest", "unknown_key_error", "validate",
]  # fmt: skip
