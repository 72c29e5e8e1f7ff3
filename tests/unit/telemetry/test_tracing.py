"""Tracing decisions that need no collector: which parent, when on, what the app receives."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.settings.config import Settings, TracingConfig, validate_config
from priority_pubsub.telemetry.tracing import NO_TRACING, _parent_carrier, build_tracer

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"


def _settings(**tracing: object) -> Settings:
    raw: dict[str, object] = {"queues": [{"name": "a"}]}
    if tracing:
        raw["tracing"] = tracing
    return validate_config(raw)


def _message() -> Message:
    return Message("m1", "a", 0, b"{}", {}, 1, 1_000, Lease(None, 10**13))


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                 "OTEL_SDK_DISABLED", "OTEL_TRACES_SAMPLER_ARG"):
        monkeypatch.delenv(name, raising=False)


def test_parent_is_traceparent_else_traceid() -> None:
    assert _parent_carrier({"traceparent": PARENT, "traceid": "x", "tracestate": "k=v"}) == {
        "traceparent": PARENT, "tracestate": "k=v"}
    assert _parent_carrier({"traceid": PARENT}) == {"traceparent": PARENT}
    assert _parent_carrier({"traceparent": ""}) == {}
    assert _parent_carrier(None) == {}


def test_off_by_default_and_on_from_the_standard_environment(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    assert build_tracer(_settings()) is NO_TRACING
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    tracer = build_tracer(_settings())
    assert tracer is not NO_TRACING
    asyncio.run(tracer.close())
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert build_tracer(_settings(otlp_endpoint="http://127.0.0.1:1")) is NO_TRACING


def test_bad_tracing_keys_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"tracing\.protocol"):
        _settings(protocol="udp")
    with pytest.raises(ConfigError, match=r"tracing\.sample_ratio"):
        _settings(sample_ratio=2)
    assert TracingConfig().protocol is None


def test_an_unsampled_attempt_still_passes_a_child_context_to_the_app() -> None:
    """sample_ratio 0 records nothing new, but the app still gets a traceparent of this hop
    (flag 00) in the publisher's trace, as daprd does."""
    tracer = build_tracer(_settings(otlp_endpoint="http://127.0.0.1:1", sample_ratio=0))
    trace = tracer.attempt(_message())
    event = {"traceparent": PARENT + "-00"}
    request = trace.inject(AppRequest(b"{}", {"traceparent": "old"}, event), "http://app")
    version, trace_id, span_id, flags = request.headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", PARENT.split("-")[1], "00")
    assert span_id != PARENT.split("-")[2]
    trace.settling()
    trace.end(Outcome.ack(200))
    asyncio.run(tracer.close())


def test_the_events_baggage_is_on_the_span_and_reaches_the_app_unchanged() -> None:
    """The span's parent context holds the event's baggage (OpenTelemetry baggage) and the
    span shows it as ``baggage.<key>`` attributes, values decoded; the app's ``baggage``
    header is the event's as published, never re-encoded by the propagator."""
    from opentelemetry.baggage import get_all
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from priority_pubsub.telemetry.tracing import OtelDeliveryTracer

    class ContextBaggage(SpanProcessor):
        """What a processor (e.g. a baggage-to-attributes one) sees in the span's context."""

        seen: ClassVar[list[dict[str, object]]] = []

        def on_start(self, span: Span, parent_context: Context | None = None) -> None:
            self.seen.append(dict(get_all(parent_context)))

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(ContextBaggage())
    tracer = OtelDeliveryTracer(provider, "local")
    sent = "tenant=acme;ttl=60,user=J%C3%B6rg+Ann"
    for event in ({"traceparent": PARENT + "-01", "baggage": sent}, {"baggage": sent},
                  {"baggage": "not baggage"}):
        trace = tracer.attempt(_message())
        request = trace.inject(AppRequest(b"{}", {"baggage": sent}, event), "http://app")
        assert request.headers["baggage"] == sent
        trace.end(Outcome.ack(200))
    traced, untraced, invalid = exporter.get_finished_spans()
    for span in (traced, untraced):
        assert span.attributes is not None
        assert (span.attributes["baggage.tenant"], span.attributes["baggage.user"]) == (
            "acme", "Jörg+Ann")  # W3C escapes are %XX; a + is a plus
    assert traced.parent is not None
    assert f"{traced.parent.trace_id:032x}" == PARENT.split("-")[1]
    assert invalid.attributes is not None
    assert not any(key.startswith("baggage.") for key in invalid.attributes)
    assert ContextBaggage.seen == [{"tenant": "acme", "user": "Jörg+Ann"}] * 2 + [{}]
    asyncio.run(tracer.close())
