"""Free loopback ports and waiting for servers (the same helpers the benchmarks use)."""

from __future__ import annotations

import pytest

from bench._common import free_port, wait_http

__all__ = ["free_port", "wait_http"]


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
