"""The conductor's OpenAI API through the official client, against simulator engines
(and a fake engine that records what it receives)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from tests.plugins.fake_vllm import FakeVllm
from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]
EXACT = {"ignore_eos": True, "seed": 7}


def direct_chat(url: str, **body: Any) -> dict[str, Any]:
    """The same request sent straight to an engine."""
    response = httpx.post(f"{url}/v1/chat/completions", json={"model": "ds-32b", **body}, timeout=30)
    response.raise_for_status()
    return dict(response.json())


@pytest.fixture(scope="module")
def stack(make_module_stack: Callable[..., Stack]) -> Stack:
    """One stack for the tests that only read from it."""
    return make_module_stack(policy="gpu-only")


def test_chat_non_streaming_returns_the_engines_answer(stack: Stack) -> None:
    client = stack.openai()
    result = client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=12, extra_body=EXACT)
    direct = direct_chat(stack.gpu_url, messages=MESSAGES, max_tokens=12, **EXACT)
    assert result.choices[0].message.content == direct["choices"][0]["message"]["content"]
    assert result.choices[0].finish_reason == "length"
    assert result.usage is not None and result.usage.completion_tokens == 12
    assert result.usage.prompt_tokens == direct["usage"]["prompt_tokens"]
    assert result.id.startswith("chatcmpl-")


def test_chat_streaming_passes_chunks_through_with_usage(stack: Stack) -> None:
    client = stack.openai()
    stream = client.chat.completions.create(
        model="ds-32b", messages=MESSAGES, max_tokens=10, stream=True,
        stream_options={"include_usage": True}, extra_body=EXACT,
    )
    text, finish, usage, ids = "", None, None, set()
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    direct = direct_chat(stack.gpu_url, messages=MESSAGES, max_tokens=10, **EXACT)
    assert text == direct["choices"][0]["message"]["content"]
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 10
    assert len(ids) == 1


def test_completions_streaming_and_not(stack: Stack) -> None:
    client = stack.openai()
    whole = client.completions.create(model="ds-32b", prompt="Once upon a time", max_tokens=6, extra_body=EXACT)
    assert whole.usage is not None and whole.usage.completion_tokens == 6
    streamed = "".join(
        c.choices[0].text for c in client.completions.create(
            model="ds-32b", prompt="Once upon a time", max_tokens=6, stream=True, extra_body=EXACT)
        if c.choices
    )
    assert streamed == whole.choices[0].text and streamed


def test_missing_model_and_limit_take_the_configured_defaults(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", config={"models": {"params": {"max_tokens": 5}}})
    response = httpx.post(f"{stack.url}/v1/chat/completions",
                          json={"messages": MESSAGES, **EXACT}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "ds-32b"
    assert body["usage"]["completion_tokens"] == 5


def test_max_completion_tokens_is_not_rewritten(stack: Stack) -> None:
    response = httpx.post(f"{stack.url}/v1/chat/completions",
                          json={"messages": MESSAGES, "max_completion_tokens": 3, **EXACT}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 3


def test_models_health_metrics_and_docs(stack: Stack) -> None:
    models = stack.openai().models.list()
    assert [m.id for m in models.data] == ["ds-32b"]
    health = httpx.get(f"{stack.url}/health", timeout=5).json()
    assert health["status"] == "ok" and set(health["engines"]) == {"gpu0", "cpu0"}
    before = stack.metric("syshax_requests_total", device="gpu", mode="whole", outcome="ok")
    stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=2)
    assert stack.metric("syshax_requests_total", device="gpu", mode="whole", outcome="ok") == before + 1
    assert stack.metric("syshax_engine_state", engine="cpu0", state="up") == 1
    assert httpx.get(f"{stack.url}/openapi.json", timeout=5).json()["paths"]["/v1/chat/completions"]


def test_the_boxs_own_routes_answer_get_and_head_and_document_themselves(stack: Stack) -> None:
    paths = httpx.get(f"{stack.url}/openapi.json", timeout=5).json()["paths"]
    own = {"/v1/models", "/health", "/metrics", "/get_load", "/load", "/get_model_info", "/get_server_info"}
    assert own <= {path for path, ops in paths.items() if set(ops) == {"get"}}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/chat/pd_disagg"} <= {
        path for path, ops in paths.items() if set(ops) == {"post"}}
    assert not {"/docs", "/redoc", "/openapi.json"} & set(paths)
    for page in ("/docs", "/redoc"):
        r = httpx.get(f"{stack.url}{page}", timeout=5)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "/openapi.json" in r.text
    head = httpx.head(f"{stack.url}/health", timeout=5)
    got = httpx.get(f"{stack.url}/health", timeout=5)
    assert head.status_code == got.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
    metrics = httpx.get(f"{stack.url}/metrics", timeout=5)
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4") and "syshax_" in metrics.text
    refused = httpx.post(f"{stack.url}/health", json={}, timeout=5)
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
    assert refused.json()["error"]["message"] == "POST /health: Method Not Allowed"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b'{"messages": []}', 400, "non-empty array"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400, "at least 1"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}', 400, "must be an integer"),
        (b'{"messages": [{"role": "user", "content": "x"}], "n": 17}', 400, "'n' must be from 1 to 16"),
        (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', 400, "'stream'"),
        (b"\xff\xfe", 400, "UTF-8"),
    ],
)
def test_bad_input_gets_a_precise_openai_error(stack: Stack, body: bytes, status: int, needle: str) -> None:
    response = httpx.post(f"{stack.url}/v1/chat/completions", content=body,
                          headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == status
    error = response.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"


def test_oversized_body_is_413(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", config={"services": {"conductor": {"max_body_bytes": 2048}}})
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    response = httpx.post(f"{stack.url}/v1/chat/completions", json=big, timeout=10)
    assert response.status_code == 413 and "max_body_bytes" in response.json()["error"]["message"]


def test_unknown_fields_pass_through_and_unknown_model_is_the_engines_404(
    fake_engines: tuple[FakeVllm, FakeVllm], make_stack: Callable[..., Stack]
) -> None:
    # fake_engines first: set up before the daemon, so torn down after it.
    gpu, cpu = fake_engines
    stack = make_stack(policy="gpu-only", engine_ports=(gpu.port, cpu.port))
    sent = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 2,
            "x_custom_field": {"a": 1, "nested": [1.5, None, "ü", {"deep": True}]}, "x_flag": False}
    ok = httpx.post(f"{stack.url}/v1/chat/completions", json=sent, timeout=10)
    assert ok.status_code == 200, ok.text
    assert ok.json()["choices"][0]["message"]["content"] == "Hi there"
    # The engine received every field, the unknown ones included, unchanged.
    assert gpu.bodies() == [sent]
    assert cpu.bodies() == []

    with pytest.raises(openai.NotFoundError) as caught:
        stack.openai().chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    # The 404 is the engine's: the request reached it, and its own message came back.
    assert gpu.bodies()[-1]["model"] == "no-such-model"
    assert "The model `no-such-model` does not exist." in caught.value.message


def test_the_request_id_reaches_the_engine_as_the_client_sent_it_or_as_syshax_made_it(
    fake_engines: tuple[FakeVllm, FakeVllm], make_stack: Callable[..., Stack]
) -> None:
    gpu, cpu = fake_engines
    stack = make_stack(policy="gpu-only", engine_ports=(gpu.port, cpu.port))
    body = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 2}
    sent = httpx.post(f"{stack.url}/v1/chat/completions", json=body, headers={"X-Request-ID": "trace-42"}, timeout=10)
    made = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=10)
    assert sent.headers["x-request-id"] == "trace-42"
    assert gpu.request_ids == ["trace-42", made.headers["x-request-id"]]
    # The access line is written when the request is booked as finished, just after its last byte.
    assert wait_until(lambda: f"id={made.headers['x-request-id']} " in stack.log_text())


def test_api_key_is_required_when_set_and_never_logged(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only", api_key="s3cret-key-123")
    response = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES}, timeout=10)
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    wrong = httpx.post(f"{stack.url}/v1/chat/completions", json={"messages": MESSAGES},
                       headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    result = stack.openai().chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=2)
    assert result.choices[0].message.content
    assert "s3cret-key-123" not in stack.log_text()
