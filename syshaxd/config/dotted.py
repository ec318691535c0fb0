"""Dotted keys (``decider.cpu_max_batch_size``) over nested mappings and config models."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in nested dicts, creating sections (and replacing a non-mapping in the way)."""
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


def flatten(data: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of nested mappings as ``(dotted key, value)``."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, dotted + ".")
        else:
            yield dotted, value


def deep_merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` laid over it, section by section (``top`` wins at the leaves)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
