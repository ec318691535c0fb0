"""One OpenTelemetry server span per request, exported over OTLP when an endpoint is configured.

The span follows the GenAI semantic conventions (``gen_ai.operation.name``,
``gen_ai.request.model``, ``gen_ai.usage.input_tokens``/``output_tokens``,
``gen_ai.response.finish_reasons``) and carries syshax's routing as ``syshax.*`` attributes
(class, device, engine, mode, reason, time waiting in line, outcome). Its parent is the
client's W3C ``traceparent`` when it sent one, and the engine is sent this span's own, so
an engine that traces (vLLM with ``--otlp-traces-endpoint``) joins the same trace.

The OpenTelemetry SDK is imported only when ``logging.otlp_endpoint`` is set (it costs a
tenth of a second at start); spans are batched and exported from the SDK's own thread,
never on the event loop. Without an endpoint every call here is a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

log = logging.getLogger("syshaxd.tracing")


class Span(Protocol):
    """One request's span, as the conductor uses it."""

    def headers(self) -> dict[str, str]:
        """The ``traceparent`` (and ``tracestate``) to send the engine: this span as the parent."""
        ...

    def end(self, attributes: Mapping[str, Any], error: str | None = None) -> None:
        """End the span with the request's outcome (``error``: why it failed, if it did)."""
        ...


class _NoSpan:
    def headers(self) -> dict[str, str]:
        return {}

    def end(self, attributes: Mapping[str, Any], error: str | None = None) -> None:
        return None


NO_SPAN: Span = _NoSpan()


class Tracing:
    """Makes request spans; without an OTLP endpoint, none (``NO_SPAN``)."""

    def __init__(self, endpoint: str | None = None, service_name: str = "syshaxd",
                 export_timeout: float = 5.0) -> None:
        self.endpoint = endpoint
        self._tracer: Any = None
        self._provider: Any = None
        self._propagator: Any = None
        if endpoint:
            self._start(endpoint, service_name, export_timeout)

    @property
    def enabled(self) -> bool:
        """Whether spans are made and exported."""
        return self._tracer is not None

    def _start(self, endpoint: str, service_name: str, timeout: float) -> None:
        # Imported here: the SDK costs ~0.1 s to import and most daemons do not trace.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=timeout)))
        self._tracer = self._provider.get_tracer("syshaxd")
        self._propagator = TraceContextTextMapPropagator()
        log.info("tracing: one span per request to %s (OTLP over HTTP)", endpoint)

    def start(self, operation: str, model: str, carrier: Mapping[str, str], start_ns: int | None = None,
              attributes: Mapping[str, Any] | None = None) -> Span:
        """A server span for one request; ``carrier``: the client's headers (``traceparent``, lower case)."""
        if self._tracer is None:
            return NO_SPAN
        from opentelemetry.trace import SpanKind

        parent = self._propagator.extract(carrier=dict(carrier))
        span = self._tracer.start_span(
            f"{operation} {model}".strip(), context=parent, kind=SpanKind.SERVER, start_time=start_ns,
            attributes={"gen_ai.operation.name": operation, "gen_ai.request.model": model, **(attributes or {})})
        return _OtelSpan(span, self._propagator)

    def close(self) -> None:
        """Export what is left and stop the exporter's thread."""
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = self._tracer = None


class _OtelSpan:
    def __init__(self, span: Any, propagator: Any) -> None:
        self._span = span
        self._propagator = propagator

    def headers(self) -> dict[str, str]:
        from opentelemetry.trace import set_span_in_context

        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=set_span_in_context(self._span))
        return carrier

    def end(self, attributes: Mapping[str, Any], error: str | None = None) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if error is not None:
            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.end()
