"""Engines failing in every way: the client gets an answer or a clear error, and nothing leaks."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai
import pytest

from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]


def test_engine_down_at_start_does_not_affect_the_other(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    stack.engines[1].kill()  # the CPU engine
    stack.engines[1].wait()
    assert wait_until(lambda: httpx.get(f"{stack.url}/health").json()["engines"]["cpu0"]["state"] == "down")
    health = httpx.get(f"{stack.url}/health").json()
    assert health["status"] == "degraded" and any("cpu0" in r for r in health["reasons"])
    for _ in range(3):
        result = stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=3)
        assert result.choices[0].message.content


def test_error_before_first_byte_is_resubmitted_to_the_other_device(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", pair=False)
    stack.faults(stack.gpu_url, error_rate=1.0)
    for stream in (False, True):
        response = httpx.post(f"{stack.url}/v1/chat/completions",
                              json={"messages": MESSAGES, "max_tokens": 3, "stream": stream}, timeout=30)
        assert response.status_code == 200, response.text
        assert "[DONE]" in response.text if stream else response.json()["usage"]["completion_tokens"] == 3
    assert stack.metric("syshax_resubmits_total") == 2
    assert stack.metric("syshax_requests_total", device="cpu", outcome="ok") == 2


def test_streamed_request_failing_everywhere_gets_an_error_status_not_an_empty_200(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(policy="gpu-only", pair=False)
    stack.faults(stack.gpu_url, error_rate=1.0)
    stack.faults(stack.cpu_url, garbage_body=True)
    response = httpx.post(f"{stack.url}/v1/chat/completions",
                          json={"messages": MESSAGES, "max_tokens": 3, "stream": True}, timeout=30)
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "gpu0" in message and "cpu0" in message
    assert stack.metric("syshax_inflight") == 0


def test_engine_dying_mid_stream_ends_the_stream_with_an_error_event(make_stack: Callable[..., Stack]) -> None:
    # classic: with the GPU gone, the next request goes to the CPU (gpu-only would wait for the GPU).
    stack = make_stack(policy="classic", pair=False, speed=5.0)
    stack.faults(stack.gpu_url, die_mid_stream=True)
    client = stack.openai()
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=50, stream=True,
                                                    extra_body={"ignore_eos": True}):
            received.append(chunk)
    assert received, "the stream had started before the engine died"
    assert "gpu0" in str(caught.value)
    assert wait_until(lambda: stack.metric("syshax_inflight") == 0)
    # The next request goes to the CPU: the GPU is gone.
    assert wait_until(lambda: httpx.get(f"{stack.url}/health").json()["engines"]["gpu0"]["state"] == "down")
    result = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=3)
    assert result.choices[0].message.content


def test_both_engines_down_is_503_naming_them(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", pair=False)
    for proc in stack.engines:
        proc.kill()
        proc.wait()
    assert wait_until(lambda: httpx.get(f"{stack.url}/health").status_code == 503)
    response = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES}, timeout=10)
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert "gpu0" in message and "cpu0" in message and "down" in message


def test_client_disconnect_aborts_upstream_and_releases_counters(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", speed=1.0)
    with httpx.stream("POST", f"{stack.url}/v1/chat/completions",
                      json={"messages": MESSAGES, "max_tokens": 2000, "stream": True, "ignore_eos": True},
                      timeout=30) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        assert stack.metric("syshax_inflight", engine="gpu0") == 1
    assert wait_until(lambda: stack.metric("syshax_inflight", engine="gpu0") == 0)
    assert wait_until(lambda: stack.engine_metric(stack.gpu_url, "vllm:num_requests_running") == 0)
    assert stack.metric("syshax_requests_total", outcome="client_disconnect") == 1
