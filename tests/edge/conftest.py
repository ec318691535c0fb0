"""Fixtures of the attack suite: a real syshaxd with an API key and short edge limits.

The limits are short so that a test sees a timeout happen in about a second; the tests
assert what the server did (408 and close, a 431 before the head was whole, a client still
served), never how long it took.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.edge.raw import KEY
from tests.plugins.stack import Stack

#: services.conductor.limits of the daemons here.
LIMITS: dict[str, Any] = {"head_timeout": 1.0, "body_timeout": 2.0, "keep_alive": 5.0}


def edge_config(**limits: Any) -> dict[str, Any]:
    """A daemon config with :data:`LIMITS` (and ``limits`` on top)."""
    return {"services": {"conductor": {"limits": {**LIMITS, **limits}}}}


@pytest.fixture(scope="module")
def edge(make_module_stack: Callable[..., Stack]) -> Iterator[Stack]:
    """One daemon per module, API key set, the short limits; simulated engines."""
    yield make_module_stack(api_key=KEY, config=edge_config(), speed=10.0)
