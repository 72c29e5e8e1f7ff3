"""The metadata answer's pieces as daprd writes them: health durations as Go's
``time.Duration.String`` (dapr ``pkg/api/universal/metadata.go``), the native-mode answer
(one ``pubsub.<driver>`` component, each queue a subscription), and bulk entry statuses as
``postman/http/http.go`` ``DeliverBulk`` reads them."""

from __future__ import annotations

import pytest

from priority_pubsub import __version__
from priority_pubsub.app.channel.bulk import entry_outcome
from priority_pubsub.core.outcome import Kind
from priority_pubsub.publish_api.metadata import describe, go_duration
from priority_pubsub.settings.config import validate_config


@pytest.mark.parametrize(("seconds", "text"), [
    (5, "5s"), (0.5, "500ms"), (90, "1m30s"), (1.5, "1.5s"), (0, "0s"), (3600, "1h0m0s"),
    (0.000_25, "250µs"),
])
def test_durations_are_written_as_go_writes_them(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_native_mode_is_one_pubsub_component_and_a_subscription_per_queue() -> None:
    settings = validate_config({
        "driver": {"type": "local", "path": "/tmp/unused.db"},
        "queues": [{"name": "high", "route": "/urgent"}, {"name": "low"}],
        "app": {"url": "http://127.0.0.1:7000", "pubsub_name": "tasks"}, "concurrency": 6})
    answer = describe(settings, None, "worker").as_json()
    assert answer == {
        "id": "worker", "runtimeVersion": __version__,
        "components": [{"name": "tasks", "type": "pubsub.local", "version": "v1"}],
        "extended": {"daprRuntimeVersion": __version__},
        "subscriptions": [
            {"pubsubname": "tasks", "topic": "high", "rules": [{"path": "/urgent"}],
             "deadLetterTopic": "", "type": "DECLARATIVE"},
            {"pubsubname": "tasks", "topic": "low", "rules": [{"path": "/"}],
             "deadLetterTopic": "", "type": "DECLARATIVE"}],
        "appConnectionProperties": {"port": 7000, "protocol": "http",
                                    "channelAddress": "127.0.0.1", "maxConcurrency": 6},
        "actorRuntime": {"runtimeStatus": "DISABLED", "hostReady": False},
    }


@pytest.mark.parametrize(("status", "kind"), [
    ("SUCCESS", Kind.ACK), ("DROP", Kind.DROP), ("RETRY", Kind.RETRY), ("", Kind.RETRY),
    ("success", Kind.RETRY),  # daprd compares exactly: an unknown word is retried
])
def test_bulk_entry_statuses_read_exactly_as_daprd(status: str, kind: Kind) -> None:
    assert entry_outcome(status, "e1").kind is kind


def test_an_exporter_failure_is_one_line_not_a_traceback() -> None:
    import logging
    import sys

    from priority_pubsub.telemetry.logs import ExporterErrorsOnOneLine, RedactingFormatter

    try:
        raise ConnectionRefusedError("[Errno 111] Connection refused\nmore detail")
    except ConnectionRefusedError:
        record = logging.LogRecord("opentelemetry.sdk._shared_internal", logging.ERROR,
                                   __file__, 1, "Exception while exporting %s.", ("Span",),
                                   sys.exc_info())
    assert ExporterErrorsOnOneLine().filter(record)
    line = RedactingFormatter(logging.BASIC_FORMAT).format(record)
    assert line == ("ERROR:opentelemetry.sdk._shared_internal:Exception while exporting Span.: "
                    "ConnectionRefusedError: [Errno 111] Connection refused")
