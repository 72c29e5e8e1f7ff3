"""OpenTelemetry tracing of deliveries, as daprd traces them: one span per attempt.

Each attempt gets a CONSUMER span that is a child of the event's ``traceparent`` (or of its
``traceid``, which Dapr falls back to), carries the messaging semantic-convention attributes,
and whose own context is what the app receives as ``traceparent`` — so the hop through the
queue shows in the trace between the publisher and the app. The receive wait and the settle
are span events (``received`` with the wait, ``settle`` and ``settled``). The event's W3C
``baggage`` is the span context's OpenTelemetry baggage and shows as ``baggage.<key>``
attributes (the app gets the header itself unchanged, from the event, not re-encoded).

Off by default: enabled by a ``tracing:`` section or by ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` in the environment (``OTEL_SDK_DISABLED=true`` turns it
off). Spans are exported by the SDK's batch processor on its own thread: a slow or absent
collector costs dropped spans and a log line, never a delayed or failed delivery.

The worker calls only ``attempt()`` and the three ``AttemptTrace`` methods; with tracing off
they are no-ops, and the OpenTelemetry packages (extra ``tracing``) are never imported.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from priority_pubsub.core import baggage
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.settings.config import Settings, TracingConfig
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

log = get_logger(__name__)
SERVICE_NAME = "priority-pubsub"
# messaging.system well-known values (OpenTelemetry messaging semantic conventions).
_MESSAGING_SYSTEMS = {"sqs": "aws_sqs", "gcp_pubsub": "gcp_pubsub",
                      "azure_servicebus": "servicebus", "rabbitmq": "rabbitmq"}
_ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOL_ENV = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


class AttemptTrace(Protocol):
    """The trace of one delivery attempt, fed by the worker at three points."""

    def inject(self, request: AppRequest, url: str) -> AppRequest:
        """Start the span (child of the event's trace) and give the app its traceparent."""

    def settling(self) -> None:
        """The outcome is decided; the settle call to the broker starts."""

    def end(self, outcome: Outcome) -> None:
        """The attempt is settled (or its settle failed): record the outcome, end the span."""


class _NoTrace:
    def inject(self, request: AppRequest, url: str) -> AppRequest:
        return request

    def settling(self) -> None:
        return None

    def end(self, outcome: Outcome) -> None:
        return None


NO_TRACE: AttemptTrace = _NoTrace()


class DeliveryTracer:
    """Tracing off: every attempt gets ``NO_TRACE``."""

    def attempt(self, message: Message) -> AttemptTrace:
        return NO_TRACE

    async def close(self) -> None:
        return None


NO_TRACING = DeliveryTracer()


class OtelDeliveryTracer(DeliveryTracer):
    """Tracing on: an SDK tracer provider of this sidecar's own (not the global one)."""

    def __init__(self, provider: TracerProvider, system: str) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("priority_pubsub")
        self._system = system

    def attempt(self, message: Message) -> AttemptTrace:
        return _SpanAttempt(self._tracer, message, self._system)

    async def close(self, timeout_s: float = 5.0) -> None:
        """Flush what is queued, but never hold the shutdown for longer than ``timeout_s``
        (the exporter may be retrying against an absent collector)."""
        done = threading.Event()

        def shutdown() -> None:
            try:
                self._provider.shutdown()
            finally:
                done.set()

        threading.Thread(target=shutdown, name="otel-shutdown", daemon=True).start()
        if not await asyncio.to_thread(done.wait, timeout_s):
            log.warning("trace export did not finish at shutdown; unsent spans dropped",
                        timeout_s=timeout_s)


class _SpanAttempt:
    def __init__(self, tracer: Tracer, message: Message, system: str) -> None:
        self._tracer = tracer
        self._message = message
        self._system = system
        self._span: Span | None = None
        self._settle_started_ns: int | None = None

    def inject(self, request: AppRequest, url: str) -> AppRequest:
        from opentelemetry.trace import set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        span = self._start(request.event)
        span.set_attribute("url.full", url)
        span.set_attribute("http.request.method", "POST")
        span.add_event("forward")
        headers = {k: v for k, v in request.headers.items() if k not in ("traceparent",
                                                                          "tracestate")}
        TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(span))
        return replace(request, headers=headers)

    def settling(self) -> None:
        self._settle_started_ns = time.time_ns()

    def end(self, outcome: Outcome) -> None:
        from opentelemetry.trace import Status, StatusCode

        span = self._span or self._start(None)  # e.g. a transform error: never forwarded
        if self._settle_started_ns is not None:
            span.add_event("settle", timestamp=self._settle_started_ns)
        span.add_event("settled", {"priority_pubsub.outcome": outcome.kind.value})
        span.set_attribute("priority_pubsub.outcome", outcome.kind.value)
        if outcome.http_status is not None:
            span.set_attribute("http.response.status_code", outcome.http_status)
        if outcome.reason:
            span.set_attribute("priority_pubsub.reason", outcome.reason)
        if outcome.kind in (Kind.RETRY, Kind.DEAD, Kind.SETTLE_FAILED):
            span.set_status(Status(StatusCode.ERROR, outcome.reason))
        span.end()

    def _start(self, event: dict[str, Any] | None) -> Span:
        from opentelemetry.trace import SpanKind

        message = self._message
        received_ns = message.received_ms * 1_000_000
        carried = _baggage_of(event)
        self._span = self._tracer.start_span(
            f"process {message.queue}",
            context=_parent_context(event, carried),
            kind=SpanKind.CONSUMER,
            start_time=received_ns,
            attributes={
                # first: past the SDK's attribute limit the oldest go, so never ours
                **{f"baggage.{key}": value for key, value in carried.items()},
                "messaging.system": self._system,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": message.queue,
                "messaging.message.id": message.id,
                "messaging.message.body.size": len(message.body),
                "priority_pubsub.attempt": message.attempt,
                "priority_pubsub.priority": message.priority,
            },
        )
        wait_ms = max(0, message.received_ms - message.enqueued_ms)
        self._span.add_event("received", {"priority_pubsub.wait_ms": wait_ms},
                             timestamp=received_ns)
        return self._span


def _parent_carrier(event: dict[str, Any] | None) -> dict[str, str]:
    """The event's W3C trace context: ``traceparent``, else ``traceid`` (Dapr's fallback)."""
    if not event:
        return {}
    parent = event.get("traceparent") or event.get("traceid")
    if not isinstance(parent, str) or not parent:
        return {}
    carrier = {"traceparent": parent}
    if isinstance(state := event.get("tracestate"), str) and state:
        carrier["tracestate"] = state
    return carrier


def _parent_context(event: dict[str, Any] | None, carried: dict[str, str]) -> Context:
    """The event's trace context, holding its baggage as OpenTelemetry baggage (what span
    processors and anything started under the span see)."""
    from opentelemetry.baggage import set_baggage
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract(_parent_carrier(event))
    for key, value in carried.items():
        context = set_baggage(key, value, context)
    return context


def _baggage_of(event: dict[str, Any] | None) -> dict[str, str]:
    """The event's baggage members, none when it has no valid one: an event published
    elsewhere may hold anything, and a span is no place to refuse it."""
    value = (event or {}).get(baggage.HEADER)
    if not isinstance(value, str):
        return {}
    try:
        return baggage.members(value)
    except baggage.BaggageError:
        return {}


def build_tracer(settings: Settings) -> DeliveryTracer:
    """``NO_TRACING`` unless tracing is configured (config or standard environment)."""
    config = _effective_config(settings.tracing)
    if config is None:
        return NO_TRACING
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        raise ConfigError("tracing: needs the tracing extra: "
                          "pip install 'priority-pubsub[tracing]'") from None
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME}
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=ParentBased(TraceIdRatioBased(_sample_ratio(config))),
    )
    provider.add_span_processor(BatchSpanProcessor(_exporter(config)))
    system = _MESSAGING_SYSTEMS.get(settings.driver.type, settings.driver.type)
    log.info("tracing on", protocol="zipkin" if config.zipkin_endpoint else config.protocol,
             endpoint=config.zipkin_endpoint or config.otlp_endpoint or "from env")
    return OtelDeliveryTracer(provider, system)


def _effective_config(config: TracingConfig | None) -> TracingConfig | None:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if config is None and not any(os.environ.get(name) for name in _ENDPOINT_ENV):
        return None
    config = config or TracingConfig()
    if config.protocol is None:
        from_env = next((os.environ[n] for n in _PROTOCOL_ENV if os.environ.get(n)), "grpc")
        protocol = "http" if from_env.strip().startswith("http") else "grpc"
        config = config.model_copy(update={"protocol": protocol})
    return config


def _sample_ratio(config: TracingConfig) -> float:
    if config.sample_ratio is not None:
        return config.sample_ratio
    try:
        return min(1.0, max(0.0, float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1"))))
    except ValueError:
        return 1.0


def _exporter(config: TracingConfig) -> SpanExporter:
    if config.zipkin_endpoint:
        from opentelemetry.exporter.zipkin.json import ZipkinExporter

        return ZipkinExporter(endpoint=config.zipkin_endpoint)
    endpoint = config.otlp_endpoint
    if config.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        if endpoint and urlsplit(endpoint).path in ("", "/"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"
        return HttpExporter(endpoint=endpoint)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )

    return GrpcExporter(endpoint=endpoint)  # http:// means plaintext, as OTEL_* endpoints do
