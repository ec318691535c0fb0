"""Connection floods: the open connections are capped below the fd limit, and per address when set.

The daemon runs with a small open-file limit (``prlimit``), so a flood that reaches the cap
takes a few hundred sockets: the cap is ``(256 - fd_reserve) / 2``. Beyond it, a connection
is answered 503 and closed at once and counted; the daemon never runs out of descriptors
(its engine connections, its monitor and its control socket keep working), a client that
was connected before goes on being served, and once the flood leaves new clients are served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.edge.raw import AUTH, KEY, Client, chat_request, wait_for
from tests.plugins.daemon import RunningDaemon

NOFILE = 256
RESERVE = 64
CAP = (NOFILE - RESERVE) // 2


def small_daemon(start: Callable[..., RunningDaemon], **limits: Any) -> RunningDaemon:
    """A daemon with an open-file limit of :data:`NOFILE`; a flood's connections wait 60 s for a head."""
    config = {"services": {"conductor": {"api_key": KEY, "limits": {"head_timeout": 60.0, "fd_reserve": RESERVE,
                                                                     **limits}}}}
    return start(config=config, launcher=["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"])


@pytest.fixture
def flood() -> Iterator[list[Client]]:
    """The attacker's sockets, closed at the end."""
    sockets: list[Client] = []
    yield sockets
    for client in sockets:
        client.close()


def refused(client: Client) -> bool:
    """The server answered 503 and closed, or closed without an answer (never: held open)."""
    client.sock.settimeout(10)
    try:
        answer = client.rest()
    except ConnectionResetError:
        return True
    return answer.startswith(b"HTTP/1.1 503 ") or answer == b""


def served(url: str, source: str = "127.0.0.1") -> bool:
    """A new client's chat completion is answered."""
    try:
        with Client(url, source) as client:
            client.send(chat_request())
            return client.answer().status == 200
    except (OSError, EOFError):
        return False


def metric(client: Client, name: str, **labels: str) -> float:
    """A sample of /metrics, read on ``client``'s connection (a new one might be refused)."""
    client.send(b"GET /metrics HTTP/1.1\r\nhost: edge\r\n" + AUTH + b"\r\n")
    text = client.answer().body.decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def test_a_flood_is_capped_below_the_fd_limit_and_new_clients_are_served_once_it_leaves(
        start_daemon: Callable[..., RunningDaemon], flood: list[Client]) -> None:
    daemon = small_daemon(start_daemon)
    keeper = Client(daemon.url)  # connected before the flood, kept alive through it
    flood.append(keeper)
    keeper.send(chat_request())
    assert keeper.answer().status == 200
    assert metric(keeper, "syshax_http_connections_max") == CAP
    for _ in range(CAP + 60):
        attacker = Client(daemon.url)
        attacker.send(b"G")  # one byte of a request line, then nothing
        flood.append(attacker)
    assert wait_for(lambda: metric(keeper, "syshax_http_connections_refused_total", reason="connection_limit") >= 60)
    assert all(refused(attacker) for attacker in flood[-50:])
    keeper.send(chat_request())  # the engines' connections and the monitor still have descriptors
    assert keeper.answer().status == 200
    assert daemon.state().engines and all(e.state == "up" for e in daemon.state().engines)
    for attacker in flood[1:]:
        attacker.close()
    assert wait_for(lambda: served(daemon.url))
    assert "Too many open files" not in daemon.log_text()


def test_one_address_past_its_cap_is_refused_while_another_address_is_served(
        start_daemon: Callable[..., RunningDaemon], flood: list[Client]) -> None:
    daemon = small_daemon(start_daemon, max_connections_per_client=8)
    for _ in range(20):
        attacker = Client(daemon.url, "127.0.0.1")
        attacker.send(b"G")
        flood.append(attacker)
    assert all(refused(attacker) for attacker in flood[8:])
    assert served(daemon.url, "127.0.0.2")
    with Client(daemon.url, "127.0.0.3") as watcher:
        assert metric(watcher, "syshax_http_connections_refused_total", reason="client_limit") == 12
