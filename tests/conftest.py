"""Shared pytest setup. Fixture plugins live in tests/plugins/, one module per area."""

from __future__ import annotations

import importlib.util

_PLUGINS = [
    "tests.plugins.ports",
    "tests.plugins.sim",
    "tests.plugins.daemon",
    "tests.plugins.llama",
    "tests.plugins.stack",
]

# A plugin module appears when its area lands; list only those present.
pytest_plugins = [name for name in _PLUGINS if importlib.util.find_spec(name) is not None]
