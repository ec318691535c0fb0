"""Device profiles: the numbers the simulator's step-time model runs on, loaded from YAML.

Every number in a profile file is written as ``{value: ..., source: "..."}`` so that the
file itself says where each figure comes from (a datasheet, a measurement, a fit, or an
estimate). Profiles ship in ``sim/profiles/``; a path to a YAML file works too.

A mixture-of-experts model adds an optional ``moe`` section: ``experts`` (routed experts
per layer), ``experts_per_token`` (top-k) and ``expert_bytes`` (the routed experts' share
of ``weight_bytes``). ``model.linear_flops_per_token`` then counts the *active*
parameters, and a step reads the dense weights plus the experts its tokens touch
(:func:`sim.timing.weight_bytes_read`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

PreemptionMode = Literal["recompute", "swap"]
GIB = 1024**3


class ProfileError(Exception):
    """A profile is missing, malformed, or has a number without a source."""


@dataclass(frozen=True)
class Profile:
    """One device serving one model: model constants, hardware, engine limits.

    Hardware figures are per device; ``devices`` is the tensor-parallel degree.
    """

    name: str
    device: Literal["gpu", "cpu"]
    summary: str
    model_name: str
    # model
    parameters: float
    layers: int
    hidden_size: int
    weight_bytes: float  # all devices together
    kv_bytes_per_token: float  # all layers, all devices together
    linear_flops_per_token: float
    attention_flops_coeff: float  # FLOPs = coeff x n x (c + n/2)
    # hardware
    devices: int
    peak_flops: float  # per device
    memory_bandwidth: float  # bytes/s per device
    compute_efficiency: float
    memory_efficiency: float
    allreduce_latency: float  # seconds per all-reduce call
    allreduce_bandwidth: float  # bytes/s
    step_overhead: float  # seconds per engine step
    per_seq_overhead: float  # seconds per scheduled sequence per step
    kv_cache_bytes: float  # per device
    handoff_bandwidth: float  # bytes/s a handed-off KV cache arrives at
    # engine
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    max_model_len: int
    preemption_mode: PreemptionMode
    swap_bytes: float  # per device (vLLM v0 --swap-space)
    # simulated text
    output_median_tokens: float
    output_sigma: float
    # mixture of experts (0: a dense model)
    experts: int = 0
    experts_per_token: int = 0
    expert_bytes: float = 0.0

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens of KV cache the engine can hold (whole blocks)."""
        return self.kv_blocks * self.block_size

    @property
    def kv_blocks(self) -> int:
        """KV cache blocks on the engine."""
        per_device_token = self.kv_bytes_per_token / self.devices
        return max(1, int(self.kv_cache_bytes // (per_device_token * self.block_size)))

    @property
    def swap_blocks(self) -> int:
        """Blocks of swap space for preempted requests (swap mode)."""
        per_device_token = self.kv_bytes_per_token / self.devices
        return int(self.swap_bytes // (per_device_token * self.block_size))

    def variant(self, **changes: Any) -> Profile:
        """A copy with some fields changed (e.g. ``devices=1`` for a one-card variant)."""
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ProfileError(f"unknown profile field(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes)


# YAML section -> fields read from it, with their types.
_SECTIONS: dict[str, dict[str, type]] = {
    "model": {
        "parameters": float,
        "layers": int,
        "hidden_size": int,
        "weight_bytes": float,
        "kv_bytes_per_token": float,
        "linear_flops_per_token": float,
        "attention_flops_coeff": float,
    },
    "hardware": {
        "devices": int,
        "peak_flops": float,
        "memory_bandwidth": float,
        "compute_efficiency": float,
        "memory_efficiency": float,
        "allreduce_latency": float,
        "allreduce_bandwidth": float,
        "step_overhead": float,
        "per_seq_overhead": float,
        "kv_cache_bytes": float,
        "handoff_bandwidth": float,
    },
    "engine": {
        "max_num_seqs": int,
        "max_num_batched_tokens": int,
        "block_size": int,
        "max_model_len": int,
        "swap_bytes": float,
    },
    "text": {
        "output_median_tokens": float,
        "output_sigma": float,
    },
}

_POSITIVE = {
    "parameters", "layers", "hidden_size", "weight_bytes", "kv_bytes_per_token", "devices",
    "peak_flops", "memory_bandwidth", "compute_efficiency", "memory_efficiency",
    "allreduce_bandwidth", "kv_cache_bytes", "handoff_bandwidth", "max_num_seqs",
    "max_num_batched_tokens", "block_size", "max_model_len", "output_median_tokens",
}


def _number(where: str, raw: object, kind: type) -> float | int:
    if not isinstance(raw, dict) or "value" not in raw:
        raise ProfileError(f"{where}: write numbers as {{value: ..., source: \"...\"}}")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise ProfileError(f"{where}: every number needs a source (where the figure comes from)")
    value = raw["value"]
    if isinstance(value, str):
        # PyYAML reads YAML 1.1, where "65.5e9" (no sign in the exponent) is a string
        try:
            value = float(value)
        except ValueError:
            raise ProfileError(f"{where}: value must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{where}: value must be a number, got {value!r}")
    if kind is int:
        if float(value) != int(value):
            raise ProfileError(f"{where}: value must be a whole number, got {value!r}")
        return int(value)
    if not math.isfinite(float(value)):
        raise ProfileError(f"{where}: value must be finite, got {value!r}")
    return float(value)


_MOE: dict[str, type] = {"experts": int, "experts_per_token": int, "expert_bytes": float}


def _moe(origin: str, block: object, weight_bytes: float) -> dict[str, Any]:
    """The optional ``moe`` section, checked (empty for a dense model)."""
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ProfileError(f"{origin}: 'moe' must be a mapping")
    out: dict[str, Any] = {}
    for key, kind in _MOE.items():
        if key not in block:
            raise ProfileError(f"{origin}: missing moe.{key}")
        out[key] = _number(f"{origin}: moe.{key}", block[key], kind)
        if out[key] <= 0:
            raise ProfileError(f"{origin}: moe.{key} must be positive, got {out[key]}")
    if out["experts_per_token"] > out["experts"]:
        raise ProfileError(f"{origin}: moe.experts_per_token {out['experts_per_token']} > moe.experts {out['experts']}")
    if out["expert_bytes"] > weight_bytes:
        raise ProfileError(f"{origin}: moe.expert_bytes is part of model.weight_bytes and cannot exceed it")
    return out


def parse_profile(data: object, origin: str) -> Profile:
    """Build a Profile from parsed YAML, checking every number has a source."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile is a YAML mapping")
    values: dict[str, Any] = {}
    for key in ("name", "device", "summary", "model_name"):
        raw = data.get(key)
        if not isinstance(raw, str) or not raw:
            raise ProfileError(f"{origin}: '{key}' must be a non-empty string")
        values[key] = raw
    if values["device"] not in ("gpu", "cpu"):
        raise ProfileError(f"{origin}: device must be 'gpu' or 'cpu', got {values['device']!r}")
    for section, wanted in _SECTIONS.items():
        block = data.get(section)
        if not isinstance(block, dict):
            raise ProfileError(f"{origin}: missing section '{section}'")
        for key, kind in wanted.items():
            if key not in block:
                raise ProfileError(f"{origin}: missing {section}.{key}")
            number = _number(f"{origin}: {section}.{key}", block[key], kind)
            if key in _POSITIVE and number <= 0:
                raise ProfileError(f"{origin}: {section}.{key} must be positive, got {number}")
            if number < 0:
                raise ProfileError(f"{origin}: {section}.{key} must not be negative, got {number}")
            values[key] = number
    values.update(_moe(origin, data.get("moe"), values["weight_bytes"]))
    mode = data["engine"].get("preemption_mode", "recompute")
    if mode not in ("recompute", "swap"):
        raise ProfileError(f"{origin}: engine.preemption_mode must be 'recompute' or 'swap', got {mode!r}")
    values["preemption_mode"] = mode
    for key in ("compute_efficiency", "memory_efficiency"):
        if values[key] > 1:
            raise ProfileError(f"{origin}: hardware.{key} is a fraction (0..1], got {values[key]}")
    return Profile(**values)


def profile_names() -> list[str]:
    """Names of the profiles shipped with the package."""
    folder = resources.files("sim").joinpath("profiles")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str) -> Profile:
    """Load a shipped profile by name, or a profile YAML file by path."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        path = Path(name_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from None
        origin = str(path)
    else:
        names = profile_names()
        if name_or_path not in names:
            raise ProfileError(f"unknown profile {name_or_path!r}; choose one of: {', '.join(names)}")
        resource = resources.files("sim").joinpath(f"profiles/{name_or_path}.yaml")
        text = resource.read_text(encoding="utf-8")
        origin = f"{name_or_path}.yaml"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{origin}: not valid YAML: {exc}") from None
    return parse_profile(data, origin)


def sources(name_or_path: str) -> dict[str, str]:
    """``section.key -> source`` for every number in a profile (for docs and tables)."""
    profile_text = (
        Path(name_or_path).read_text(encoding="utf-8")
        if name_or_path.endswith((".yaml", ".yml"))
        else resources.files("sim").joinpath(f"profiles/{name_or_path}.yaml").read_text(encoding="utf-8")
    )
    data = yaml.safe_load(profile_text)
    out: dict[str, str] = {}
    for section in (*_SECTIONS, "moe"):
        for key, raw in (data.get(section) or {}).items():
            if isinstance(raw, dict) and "source" in raw:
                out[f"{section}.{key}"] = str(raw["source"])
    return out
