"""Request spans reach a real OTLP receiver, parented by the client's traceparent."""

from __future__ import annotations

from syshaxd.conductor.tracing import NO_SPAN, Tracing
from tests.plugins.otlp import Receiver

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"


def test_a_span_joins_the_clients_trace_and_carries_the_genai_and_routing_attributes(otlp_receiver: Receiver) -> None:
    tracing = Tracing(otlp_receiver.url, service_name="syshaxd-test")
    try:
        span = tracing.start("chat", "ds-32b", {"traceparent": TRACEPARENT})
        sent = span.headers()["traceparent"]
        span.end({"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 7,
                  "gen_ai.response.finish_reasons": ["stop"], "syshax.device": "cpu", "syshax.engine": "cpu0",
                  "syshax.mode": "whole", "syshax.class": "batch", "syshax.queued_s": None})
    finally:
        tracing.close()  # flushes the batch
    (got,) = otlp_receiver.wait_for(1)
    assert (got.name, got.trace_id, got.parent_span_id, got.service) == ("chat ds-32b", CLIENT_TRACE, CLIENT_SPAN,
                                                                          "syshaxd-test")
    assert got.kind == 2  # SPAN_KIND_SERVER
    assert got.attributes["gen_ai.request.model"] == "ds-32b" and got.attributes["gen_ai.usage.output_tokens"] == 7
    assert got.attributes["gen_ai.response.finish_reasons"] == ["stop"] and got.attributes["syshax.class"] == "batch"
    assert "syshax.queued_s" not in got.attributes  # unknown values are left out, not sent as null
    # The engine is sent this span as its parent: same trace, this span's id.
    assert sent == f"00-{CLIENT_TRACE}-{got.span_id}-01"


def test_a_request_without_a_traceparent_starts_a_trace_and_a_failure_is_an_error_span(otlp_receiver: Receiver) -> None:
    tracing = Tracing(otlp_receiver.url)
    try:
        tracing.start("text_completion", "m", {}).end({"syshax.outcome": "engine_error"}, error="engine gpu0 failed")
    finally:
        tracing.close()
    (got,) = otlp_receiver.wait_for(1)
    assert got.parent_span_id == "" and len(got.trace_id) == 32 and got.status_code == 2  # STATUS_CODE_ERROR


def test_without_an_endpoint_nothing_is_traced_or_imported() -> None:
    tracing = Tracing(None)
    assert not tracing.enabled and tracing.start("chat", "m", {"traceparent": TRACEPARENT}) is NO_SPAN
    assert NO_SPAN.headers() == {}
