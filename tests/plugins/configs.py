"""Config files for the daemons tests start: defaults, with a test's own keys merged on top."""

from __future__ import annotations

from typing import Any


def deep_update(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``top`` merged in, section by section (``top`` wins); returns ``base``."""
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = value
    return base
