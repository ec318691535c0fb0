"""Every routing path: GPU, CPU, split (each handoff protocol), queued and rejected."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from syshaxd.sse import Decoder
from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]
EXACT = {"ignore_eos": True, "seed": 11}


def single_engine_text(url: str, max_tokens: int) -> str:
    response = httpx.post(f"{url}/v1/chat/completions",
                          json={"model": "ds-32b", "messages": MESSAGES, "max_tokens": max_tokens, **EXACT}, timeout=30)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize(("policy", "device"), [("gpu-only", "gpu"), ("cpu-only", "cpu")])
def test_policy_sends_requests_to_its_device(make_stack: Callable[..., Stack], policy: str, device: str) -> None:
    stack = make_stack(policy=policy)
    url = stack.gpu_url if device == "gpu" else stack.cpu_url
    before = stack.engine_metric(url, "vllm:generation_tokens_total")
    stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=4, extra_body=EXACT)
    assert stack.metric("syshax_requests_total", device=device, mode="whole", outcome="ok") == 1
    assert stack.engine_metric(url, "vllm:generation_tokens_total") - before == 4


def _split_answer(stack: Stack, stream: bool) -> tuple[str, list[str], dict[str, Any]]:
    response = httpx.post(
        f"{stack.url}/v1/chat/pd_disagg",
        json={"model": "ds-32b", "messages": MESSAGES, "max_tokens": 9, "stream": stream,
              "stream_options": {"include_usage": True} if stream else None, **EXACT},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    if not stream:
        body = response.json()
        return body["choices"][0]["message"]["content"], [body["choices"][0]["finish_reason"]], body["usage"]
    events = Decoder(strict=True).feed(response.content)
    assert events[-1].done
    chunks = [e.json() for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    return text, finish, [c["usage"] for c in chunks if c.get("usage")][-1]


@pytest.mark.parametrize("handoff", ["recompute", "syshax", "kv-transfer"])
def test_pd_split_answer_matches_a_single_engine(make_stack: Callable[..., Stack], handoff: str) -> None:
    stack = make_stack(policy="classic", handoff=handoff)
    expected = single_engine_text(stack.gpu_url, 9)
    for stream in (False, True):
        cpu_before = stack.engine_metric(stack.cpu_url, "vllm:generation_tokens_total")
        text, finish, usage = _split_answer(stack, stream)
        assert text == expected
        assert finish == ["length"]
        assert usage["completion_tokens"] == 9
        assert stack.engine_metric(stack.cpu_url, "vllm:generation_tokens_total") > cpu_before
    assert stack.metric("syshax_requests_total", mode="pd_split", outcome="ok") == 2


def _slow_request(url: str, results: list[Any], max_tokens: int = 400) -> None:
    response = httpx.post(f"{url}/v1/chat/completions",
                          json={"messages": MESSAGES, "max_tokens": max_tokens, **EXACT}, timeout=60)
    results.append(response)


def test_no_capacity_queues_then_admits(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", config={"decider": {"gpu_max_batch_size": 1, "cpu_max_batch_size": 0}})
    stack.faults(stack.gpu_url, paused=True)  # the first request holds the one GPU slot until resumed
    results: list[Any] = []
    first = threading.Thread(target=_slow_request, args=(stack.url, results, 20))
    second = threading.Thread(target=_slow_request, args=(stack.url, results, 3))
    try:
        first.start()
        assert wait_until(lambda: stack.metric("syshax_decisions_total") == 1)
        second.start()
        assert wait_until(lambda: stack.metric("syshax_queue_depth") == 1)
    finally:
        stack.faults(stack.gpu_url, paused=False)
        first.join(60)
        second.join(60)
    assert [r.status_code for r in results] == [200, 200]
    assert stack.metric("syshax_queue_depth") == 0


def test_full_queue_is_429_with_retry_after(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", config={"decider": {"gpu_max_batch_size": 1, "cpu_max_batch_size": 0},
                                                 "system": {"max_queue_size": 0}})
    stack.faults(stack.gpu_url, paused=True)
    results: list[Any] = []
    first = threading.Thread(target=_slow_request, args=(stack.url, results, 20))
    try:
        first.start()
        assert wait_until(lambda: stack.metric("syshax_decisions_total") == 1)
        rejected = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2},
                              timeout=60)
    finally:
        stack.faults(stack.gpu_url, paused=False)
        first.join(60)
    assert rejected.status_code == 429
    assert rejected.headers["Retry-After"].isdigit()
    assert "queue is full" in rejected.json()["error"]["message"]
    assert results[0].status_code == 200


def test_running_and_waiting_requests_time_out_with_504(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", speed=1.0,
                       config={"decider": {"cpu_max_batch_size": 0}, "system": {"request_timeout": 1.5}})
    running = httpx.post(f"{stack.url}/v1/chat/completions",
                         json={"messages": MESSAGES, "max_tokens": 1500, **EXACT}, timeout=10)
    assert running.status_code == 504
    assert "request_timeout" in running.json()["error"]["message"]
    # With the GPU draining and no CPU capacity, a request can only wait, then time out.
    sock = stack.tmp / "run" / "control.sock"
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://syshax") as control:
        control.patch("/v1/config", json={"engines.gpu0.draining": True}).raise_for_status()
    waited = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2}, timeout=10)
    assert waited.status_code == 504
    assert "no capacity" in waited.json()["error"]["message"]
    assert stack.metric("syshax_inflight") == 0
    assert stack.metric("syshax_queue_depth") == 0
    assert stack.metric("syshax_requests_total", outcome="timeout") == 2
