"""A real daemon traces each request to a real OTLP receiver, joined to the client's trace, and
hands the engine its span as the parent."""

from __future__ import annotations

from collections.abc import Callable

from tests.plugins.fake_vllm import FakeVllm
from tests.plugins.otlp import Receiver
from tests.plugins.stack import Stack

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]


def test_one_span_per_request_parented_by_the_clients_traceparent(
        otlp_receiver: Receiver, fake_engines: tuple[FakeVllm, FakeVllm], make_stack: Callable[..., Stack]) -> None:
    gpu, _ = fake_engines
    stack = make_stack(policy="gpu-only", engine_ports=(gpu.port, fake_engines[1].port),
                       config={"logging": {"otlp_endpoint": otlp_receiver.url}})
    client = stack.openai()
    traced = client.chat.completions.with_raw_response.create(
        model="ds-32b", messages=MESSAGES, max_tokens=2,
        extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "x-syshax-class": "batch"})
    untraced = client.chat.completions.with_raw_response.create(model="ds-32b", messages=MESSAGES, max_tokens=2)
    spans = {s.attributes["syshax.request_id"]: s for s in otlp_receiver.wait_for(2)}
    joined = spans[traced.headers["x-request-id"]]
    assert (joined.trace_id, joined.parent_span_id, joined.kind) == (CLIENT_TRACE, CLIENT_SPAN, 2)
    assert joined.name == "chat ds-32b" and joined.attributes["gen_ai.request.model"] == "ds-32b"
    assert joined.attributes["syshax.class"] == "batch" and joined.attributes["syshax.device"] == "gpu"
    assert joined.attributes["syshax.engine"] == "gpu0" and joined.attributes["syshax.outcome"] == "ok"
    assert joined.attributes["gen_ai.usage.input_tokens"] > 0
    fresh = spans[untraced.headers["x-request-id"]]
    assert fresh.parent_span_id == "" and fresh.trace_id != CLIENT_TRACE and fresh.name == "chat ds-32b"
    # The engine was sent each request's own span as its parent: a tracing vLLM joins the same trace.
    # (the flags may carry W3C level 2's random-trace-id bit beside "sampled")
    assert [p[:-3] if p else p for p in gpu.traceparents] == [f"00-{CLIENT_TRACE}-{joined.span_id}",
                                                               f"00-{fresh.trace_id}-{fresh.span_id}"]
    assert len(otlp_receiver.wait_for(2)) == 2  # one span each, no more
