"""The llamacpp-slots pair check the daemon runs at start, against real llama-servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from syshaxd.conductor.handoff.llamacpp_pairs import PairChecks
from tests.plugins.llama import LlamaFactory, LlamaServer
from tests.plugins.ports import free_port

pytestmark = pytest.mark.llama


@dataclass
class Engine:
    """A named engine with its client, as the conductor's upstreams are."""

    name: str
    http: httpx.AsyncClient


@pytest.fixture
async def clients() -> AsyncIterator[list[httpx.AsyncClient]]:
    """Clients to close at teardown."""
    made: list[httpx.AsyncClient] = []
    yield made
    for client in made:
        await client.aclose()


def _engine(clients: list[httpx.AsyncClient], name: str, url: str) -> Engine:
    client = httpx.AsyncClient(base_url=url, timeout=10)
    clients.append(client)
    return Engine(name, client)


async def test_a_matching_pair_is_usable(
    llama_pair: tuple[LlamaServer, LlamaServer], clients: list[httpx.AsyncClient]
) -> None:
    a, b = llama_pair
    checks = PairChecks()
    verdict = await checks.verdict(_engine(clients, "gpu0", a.url), _engine(clients, "cpu0", b.url))
    assert verdict.ok is True
    assert "4 slots of 1024 tokens" in verdict.message


async def test_a_server_that_is_not_up_yet_is_checked_again_later(
    llama_server: LlamaServer, clients: list[httpx.AsyncClient]
) -> None:
    checks = PairChecks(retry_after=0.0)
    gpu = _engine(clients, "gpu0", llama_server.url)
    dead = _engine(clients, "cpu0", f"http://127.0.0.1:{free_port()}")
    first = await checks.verdict(gpu, dead)
    assert first.ok is None
    assert "failed" in first.message
    # The same engine name, now answering (its server came up): the next split checks again.
    later = await checks.verdict(gpu, _engine(clients, "cpu0", llama_server.url))
    assert later.ok is True


async def test_an_unknown_verdict_is_kept_until_retry_after(
    llama_server: LlamaServer, clients: list[httpx.AsyncClient]
) -> None:
    checks = PairChecks(retry_after=3600.0)
    gpu = _engine(clients, "gpu0", llama_server.url)
    await checks.verdict(gpu, _engine(clients, "cpu0", f"http://127.0.0.1:{free_port()}"))
    again = await checks.verdict(gpu, _engine(clients, "cpu0", llama_server.url))
    assert again.ok is None
    checks.forget("gpu0", "cpu0")
    assert (await checks.verdict(gpu, _engine(clients, "cpu0", llama_server.url))).ok is True


async def test_a_server_without_slot_files_is_refused(
    llama_factory: LlamaFactory, clients: list[httpx.AsyncClient]
) -> None:
    a = llama_factory()
    b = llama_factory(slot_save=False)
    verdict = await PairChecks().verdict(_engine(clients, "gpu0", a.url), _engine(clients, "cpu0", b.url))
    assert verdict.ok is False, verdict
    assert "--slot-save-path" in verdict.message
