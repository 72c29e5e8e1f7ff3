"""OpenTelemetry tracing against a real OTLP receiver process (tests/support/otlp_receiver.py):
one span per attempt, a child of the event's trace, and the app gets that span's context."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import journal_records, publish, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.servers import free_port
from tests.support.sidecar import SidecarProcess, local_config, write_config

pytestmark = pytest.mark.local

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
# Spans leave the batch processor quickly in tests (the SDK's default delay is 5 s).
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[OtlpReceiver]:
    with OtlpReceiver(tmp_path) as running:
        yield running


def _event(**trace: str) -> str:
    """A CloudEvent as Dapr publishes it (tests/fixtures/samples/dapr-cloudevent.json)."""
    return json.dumps({"specversion": "1.0", "id": "evt-1", "source": "frontend",
                       "type": "com.dapr.event.sent", "datacontenttype": "application/json",
                       "data": {"job": 1}, "topic": "high", "pubsubname": "pubsub", **trace})


def _header(received: Received, name: str) -> str:
    return next(v for k, v in received.headers.items() if k.lower() == name)


def _run(tmp_path: Path, app: RecordingApp, tracing: dict[str, Any] | None, body: str,
         deliveries: int, env: dict[str, str] | None = None) -> tuple[list[Received], int]:
    extra = {"tracing": tracing} if tracing is not None else {}
    config = local_config(tmp_path, app.url, **extra)
    publish(write_config(tmp_path, config), "high", body)
    sidecar = SidecarProcess(tmp_path, config, env={**FAST_EXPORT, **(env or {})})
    try:
        received = app.wait_for(deliveries)
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == deliveries)
    finally:
        code = sidecar.stop()
    return received, code


def _span_of(received: Received, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """The exported span whose context the app received as traceparent."""
    _, trace_id, span_id, _ = _header(received, "traceparent").split("-")
    matching = [s for s in spans if s["span_id"] == span_id]
    assert len(matching) == 1, (span_id, spans)
    assert matching[0]["trace_id"] == trace_id
    return matching[0]


def test_one_span_per_attempt_child_of_the_events_traceparent(
    tmp_path: Path, app: RecordingApp, receiver: OtlpReceiver
) -> None:
    received, code = _run(tmp_path, app, {"otlp_endpoint": receiver.grpc_endpoint},
                          _event(traceparent=TRACEPARENT, tracestate="vendor=1"), 1)
    assert code == 0
    spans = receiver.wait_for(1)
    assert len(spans) == 1
    span = _span_of(received[0], spans)
    assert span["transport"] == "grpc"
    assert span["trace_id"] == TRACE_ID  # the trace joins the publisher's
    assert span["parent_span_id"] == PARENT_ID
    assert span["kind"] == 5  # SPAN_KIND_CONSUMER
    assert span["name"] == "process high"
    assert span["resource"]["service.name"] == "priority-pubsub"
    attributes = span["attributes"]
    assert attributes["messaging.system"] == "local"
    assert attributes["messaging.destination.name"] == "high"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["priority_pubsub.attempt"] == 1
    assert attributes["priority_pubsub.outcome"] == "ack"
    assert attributes["http.response.status_code"] == 200
    record = journal_records(tmp_path / "journal")[0]
    assert attributes["messaging.message.id"] == record["message_id"]
    assert [e["name"] for e in span["events"]] == ["received", "forward", "settle", "settled"]
    assert _header(received[0], "tracestate") == "vendor=1"
    # the event itself is forwarded unchanged: the app sees the publisher's traceparent there
    assert received[0].event["traceparent"] == TRACEPARENT


def test_the_events_baggage_is_on_the_span_and_the_app_gets_it_as_published(
    tmp_path: Path, app: RecordingApp, receiver: OtlpReceiver
) -> None:
    """Beyond daprd up to 1.18: the span shows the event's baggage as ``baggage.<key>``
    (values decoded); the app's ``baggage`` header is the event's, not re-encoded, though
    tracing rewrites its ``traceparent``."""
    sent = "tenant=acme;ttl=60,user=J%C3%B6rg"
    received, _ = _run(tmp_path, app, {"otlp_endpoint": receiver.grpc_endpoint},
                       _event(traceparent=TRACEPARENT, baggage=sent), 1)
    span = _span_of(received[0], receiver.wait_for(1))
    assert span["parent_span_id"] == PARENT_ID
    assert {k: v for k, v in span["attributes"].items() if k.startswith("baggage.")} == {
        "baggage.tenant": "acme", "baggage.user": "Jörg"}
    assert _header(received[0], "baggage") == sent
    assert _header(received[0], "traceparent") != TRACEPARENT  # this hop's span, as before


def test_a_retry_gives_two_spans_with_the_same_parent(
    tmp_path: Path, app: RecordingApp, receiver: OtlpReceiver
) -> None:
    app.behaviour = lambda r: Reply(500 if r.event["attempt"] == 1 else 200)
    received, code = _run(tmp_path, app, {"otlp_endpoint": receiver.grpc_endpoint},
                          _event(traceparent=TRACEPARENT), 2)
    assert code == 0
    spans = receiver.wait_for(2)
    assert len(spans) == 2
    first, second = (_span_of(r, spans) for r in received)
    assert first["span_id"] != second["span_id"]
    for span, attempt, outcome, status in ((first, 1, "retry", 500), (second, 2, "ack", 200)):
        assert span["trace_id"] == TRACE_ID
        assert span["parent_span_id"] == PARENT_ID
        assert span["attributes"]["priority_pubsub.attempt"] == attempt
        assert span["attributes"]["priority_pubsub.outcome"] == outcome
        assert span["attributes"]["http.response.status_code"] == status
    assert first["status"]["code"] == 2  # STATUS_CODE_ERROR: the attempt failed
    assert "app returned 500" in first["status"]["message"]


def test_traceid_is_the_fallback_parent_as_in_dapr(
    tmp_path: Path, app: RecordingApp, receiver: OtlpReceiver
) -> None:
    received, _ = _run(tmp_path, app, {"otlp_endpoint": receiver.grpc_endpoint},
                       _event(traceid=TRACEPARENT), 1)
    span = _span_of(received[0], receiver.wait_for(1))
    assert (span["trace_id"], span["parent_span_id"]) == (TRACE_ID, PARENT_ID)


def test_http_protocol_and_a_message_without_trace_context(
    tmp_path: Path, app: RecordingApp, receiver: OtlpReceiver
) -> None:
    received, _ = _run(tmp_path, app, {"otlp_endpoint": receiver.http_endpoint,
                                       "protocol": "http"}, '{"plain": true}', 1)
    span = _span_of(received[0], receiver.wait_for(1))
    assert span["transport"] == "http"
    assert span["parent_span_id"] == ""  # a new trace starts here
    assert span["trace_id"] != TRACE_ID


def test_standard_otel_environment_turns_tracing_on(
    tmp_path: Path, app: RecordingApp, receiver: OtlpReceiver
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "workers"}
    received, _ = _run(tmp_path, app, None, _event(traceparent=TRACEPARENT), 1, env=env)
    span = _span_of(received[0], receiver.wait_for(1))
    assert span["transport"] == "http"
    assert span["resource"]["service.name"] == "workers"
    assert span["parent_span_id"] == PARENT_ID


def test_without_tracing_the_events_traceparent_is_passed_through(
    tmp_path: Path, app: RecordingApp
) -> None:
    received, _ = _run(tmp_path, app, None, _event(traceparent=TRACEPARENT), 1)
    assert _header(received[0], "traceparent") == TRACEPARENT


def test_an_absent_collector_never_delays_or_fails_a_delivery(
    tmp_path: Path, app: RecordingApp
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens: every export fails
    config = local_config(tmp_path, app.url, tracing={"otlp_endpoint": nobody})
    publish(write_config(tmp_path, config), "high", _event(traceparent=TRACEPARENT), count=20)
    sidecar = SidecarProcess(tmp_path, config, env=FAST_EXPORT)
    try:
        sidecar.wait_ready()
        ready = time.monotonic()
        received = app.wait_for(20, timeout_s=10)
        delivered_s = time.monotonic() - ready
        wait_until(lambda: len(journal_records(tmp_path / "journal")) == 20)
        stopping = time.monotonic()
    finally:
        code = sidecar.stop()
    assert code == 0
    assert delivered_s < 5, delivered_s  # the exporter's retries are not on the delivery path
    assert time.monotonic() - stopping < 10  # its flush at shutdown is bounded (5 s)
    assert {r["outcome"] for r in journal_records(tmp_path / "journal")} == {"ack"}
    assert all(_header(r, "traceparent").split("-")[1] == TRACE_ID for r in received)
