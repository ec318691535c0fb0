"""The books stay right on every path of the relay: each test would catch one way they go wrong."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]


@pytest.mark.parametrize("warm", [False, True], ids=["new-connection", "pooled-connection"])
def test_a_non_streamed_request_whose_client_leaves_releases_its_engine(
    make_stack: Callable[..., Stack], warm: bool
) -> None:
    # The client waits for a whole answer, then leaves before it comes: the engine's in-flight
    # count must go back to 0 and the engine must stop generating (its connection is closed).
    # Both ways a request reaches an engine: on a new connection (awaited), on a pooled one
    # (sent from the read callback, answered from the engine connection's).
    stack = make_stack(policy="gpu-only", speed=1.0)
    if warm:
        stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=2)
    host, port = stack.url.removeprefix("http://").split(":")
    body = (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000, "ignore_eos": true}')
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        assert wait_until(lambda: stack.metric("syshax_inflight", engine="gpu0") == 1)
        assert wait_until(lambda: stack.engine_metric(stack.gpu_url, "vllm:num_requests_running") == 1)
    assert wait_until(lambda: stack.metric("syshax_inflight", engine="gpu0") == 0)
    assert wait_until(lambda: stack.engine_metric(stack.gpu_url, "vllm:num_requests_running") == 0)
    assert wait_until(lambda: stack.metric("syshax_requests_total", outcome="client_disconnect") == 1)
    assert stack.metric("syshax_requests_total", outcome="ok") == (1 if warm else 0)


def test_requests_waiting_at_the_conductor_are_answered_in_arrival_order(make_stack: Callable[..., Stack]) -> None:
    # One GPU slot, held busy (its engine paused) while the others queue behind it one by one;
    # then the engine goes on and they leave in the order they came, never the last first.
    stack = make_stack(policy="classic", config={"decider": {"gpu_max_batch_size": 1, "cpu_max_batch_size": 0},
                                                 "system": {"max_queue_size": 20}})
    stack.faults(stack.gpu_url, paused=True)

    def send(i: int) -> None:
        stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=20,
                                               extra_body={"ignore_eos": True},
                                               extra_headers={"X-Request-ID": f"arrival-{i}"})

    with ThreadPoolExecutor(4) as pool:
        try:
            answers = [pool.submit(send, 0)]
            assert wait_until(lambda: stack.metric("syshax_inflight") == 1)
            for i in range(1, 4):  # the next comes once this one waits: arrival order is i
                answers.append(pool.submit(send, i))
                assert wait_until(lambda i=i: stack.metric("syshax_queue_depth") == i)
        finally:
            stack.faults(stack.gpu_url, paused=False)
        for answer in answers:
            answer.result(timeout=120)
    # The daemon logs each request as its answer ends.
    assert wait_until(lambda: stack.log_text().count("id=arrival-") == 4)
    assert re.findall(r"id=(arrival-\d)", stack.log_text()) == [f"arrival-{i}" for i in range(4)]


def test_a_stream_that_ends_without_done_is_truncated_not_ok(make_stack: Callable[..., Stack]) -> None:
    # The engine ends its answer cleanly but never sends [DONE]: the client gets an error event
    # after what came (never [DONE] as if all went well), and the daemon records "truncated".
    stack = make_stack(policy="gpu-only")
    stack.faults(stack.gpu_url, truncate_stream=1.0)
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions",
                      json={"messages": MESSAGES, "max_tokens": 6, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        text = response.read().decode()
    assert "without [DONE]" in text and "data: [DONE]" in text.split("without [DONE]", 1)[1]
    assert text.count('"error"') == 1
    assert wait_until(lambda: stack.metric("syshax_requests_total", outcome="truncated") == 1)
    assert stack.metric("syshax_inflight") == 0
    with pytest.raises(openai.APIError):
        for _ in stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=6, stream=True):
            pass


def test_request_ids_travel_from_the_client_to_the_engine_and_back(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only")
    for stream in (False, True):
        sent = f"client-id-{stream}"
        with httpx.stream("POST", f"{stack.url}/v1/chat/completions", headers={"X-Request-ID": sent},
                          json={"messages": MESSAGES, "max_tokens": 3, "stream": stream}, timeout=30) as response:
            response.read()
            assert response.headers["x-request-id"] == sent
        assert wait_until(lambda sent=sent: f"id={sent} " in stack.log_text())  # logged just after the answer
    # No id from the client: syshax makes one, logs it, and tells the client.
    response = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3},
                          timeout=30)
    made = response.headers["x-request-id"]
    assert len(made) >= 16 and wait_until(lambda: f"id={made} " in stack.log_text())
    # A header that is no usable id is replaced, not passed on.
    response = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3},
                          headers={"X-Request-ID": "bad id with spaces"}, timeout=30)
    assert response.headers["x-request-id"] != "bad id with spaces"
