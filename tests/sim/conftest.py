"""Fixtures the simulator's HTTP tests share: one tiny vLLM engine per module and an official client."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from sim.launch import EngineHandle, start_engine


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineHandle]:
    """A simulated vLLM engine (tiny profile, 50x speed) for the module's tests."""
    with start_engine("tiny", speed=50.0) as (_, handle):
        yield handle


@pytest.fixture
def client(engine: EngineHandle) -> Iterator[openai.OpenAI]:
    """The official OpenAI client pointed at :func:`engine`."""
    with openai.OpenAI(base_url=f"{engine.url}/v1", api_key="none", max_retries=0) as c:
        yield c
