"""free_port: the one port picker of the demo, the benchmarks and the tests."""

from __future__ import annotations

import socket

from syshaxd.demo.stack import free_port


def test_ports_handed_out_are_distinct_and_bindable() -> None:
    # Picking the ports of two engines and a daemon before starting any of them must not give the
    # same port twice: bind(0) alone does so now and then (seen in CI as a daemon and an engine on
    # one port). 500 picks make a repeat near certain if nothing prevents it.
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[-1]))
