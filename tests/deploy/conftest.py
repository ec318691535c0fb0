"""The deploy tests' one fixture that runs processes: a real daemon's /metrics."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.deploy.served import Served
from tests.plugins.stack import Stack


@pytest.fixture(scope="module")
def served(make_module_stack: Callable[..., Stack]) -> Served:
    """The /metrics of a daemon on simulated engines that has answered one request (labelled
    histograms appear only once observed); the stack is stopped after the module."""
    stack = make_module_stack()
    stack.openai().chat.completions.create(model="ds-32b", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return Served.parse(httpx.get(f"{stack.url}/metrics", timeout=10).text)
