"""free_port: the one port picker of the demo, the benchmarks and the tests."""

from __future__ import annotations

import socket

import pytest

from demo.ports import free_port
from tests.plugins import ports


def test_ports_handed_out_are_distinct_and_bindable() -> None:
    # Picking the ports of two engines and a daemon before starting any of them must not give the
    # same port twice: bind(0) alone does so now and then (seen in CI as a daemon and an engine on
    # one port). 500 picks make a repeat near certain if nothing prevents it.
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[-1]))


def test_xdist_workers_pick_from_disjoint_blocks_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks: list[set[int]] = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        picks = ports._worker_ports()
        assert picks is not None
        blocks.append({next(picks) for _ in range(ports._BLOCK)})
    assert all(len(b) == ports._BLOCK for b in blocks)
    assert not (blocks[0] & blocks[1]) and not (blocks[1] & blocks[2]) and not (blocks[0] & blocks[2])
    assert max(max(b) for b in blocks) < ports._ephemeral_low()
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw999")  # more workers than blocks: the kernel picks
    assert ports._worker_ports() is None
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert ports._worker_ports() is None
