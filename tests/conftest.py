"""Shared pytest setup. Fixture plugins live in tests/plugins/, one module per area."""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_PLUGINS = [
    "tests.plugins.ports",
    "tests.plugins.sim",
    "tests.plugins.daemon",
    "tests.plugins.llama",
    "tests.plugins.llama_stack",
    "tests.plugins.llama_targets",
    "tests.plugins.stack",
    "tests.plugins.fake_vllm",
    "tests.plugins.otlp",
]

# A plugin module appears when its area lands; list only those present.
pytest_plugins = [name for name in _PLUGINS if importlib.util.find_spec(name) is not None]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory in /tmp with a short path, for Unix sockets (at most 107 bytes), removed after."""
    path = Path(tempfile.mkdtemp(prefix="sx-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
