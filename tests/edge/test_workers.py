"""The edge in a worker process (``services.conductor.workers: 2``): the same limits and framing as the daemon's.

The kernel spreads new connections over the daemon and its worker (SO_REUSEPORT); each
probe runs on a connection of its own until both processes have answered some, which
``syshax_process_requests_total{process}`` tells (a connection's requests are all taken by
the process that accepted it). The probes are the ones reproduced with one process and with
two when the issue was filed: a ``100 Continue`` for a request pipelined behind a stream
(it once landed inside the stream's chunks), and a head left unfinished (it was never timed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.edge.conftest import LIMITS
from tests.edge.raw import AUTH, KEY, Client, chat_body
from tests.plugins.stack import Stack

CHAT_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: edge\r\ncontent-type: application/json\r\n" + AUTH
#: New connections tried before the test gives up on the kernel reaching both processes.
TRIES = 40


@pytest.fixture(scope="module")
def two(make_module_stack: Callable[..., Stack]) -> Iterator[Stack]:
    """A daemon with one worker beside it, API key set, the suite's short limits."""
    yield make_module_stack(api_key=KEY, speed=10.0,
                            config={"services": {"conductor": {"workers": 2, "limits": LIMITS}}})


def taken(stack: Stack) -> dict[str, float]:
    """Requests each process took ("0": the daemon, "1": the worker)."""
    return {p: stack.metric("syshax_process_requests_total", process=p) for p in ("0", "1")}


def continue_behind_a_stream_then_a_stalled_head(client: Client) -> None:
    """A stream, a request with ``expect: 100-continue`` pipelined behind it, then one byte of a
    third request: the stream's chunks stay whole, the 100 Continue follows the stream, and the
    unfinished head gets 408 and close."""
    stream, body = chat_body(max_tokens=60, stream=True), chat_body()
    client.send(CHAT_HEAD + b"content-length: %d\r\n\r\n" % len(stream) + stream
                + CHAT_HEAD + b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body))
    first = client.answer()  # read by its chunks: a 100 Continue inside them breaks the framing
    assert first.status == 200 and b"HTTP/1.1" not in first.body
    assert first.body.rstrip().endswith(b"data: [DONE]")
    assert client.interim() == b"HTTP/1.1 100 Continue"
    client.send(body)
    assert client.answer().status == 200
    client.send(b"G")
    stalled = client.answer()
    assert stalled.status == 408 and stalled.headers[b"connection"] == b"close"
    assert client.closed()


def test_both_processes_keep_the_framing_and_time_out_an_unfinished_head(two: Stack) -> None:
    probes = {"0": 0, "1": 0}
    for _ in range(TRIES):
        before = taken(two)
        with Client(two.url) as client:
            continue_behind_a_stream_then_a_stalled_head(client)
        after = taken(two)
        for process, count in after.items():
            if count > before[process]:
                probes[process] += 1
        if min(probes.values()) >= 2:
            break
    assert min(probes.values()) >= 2, f"{TRIES} connections did not reach both processes twice: {probes}"
