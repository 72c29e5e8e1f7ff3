"""The app contract as pure functions: CloudEvent building and Dapr's response table."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http_event

from priority_pubsub.app.channel.http import classify
from priority_pubsub.app.cloudevent import build_request, is_expired
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.core.outcome import Kind
from priority_pubsub.transforms.base import Payload
from priority_pubsub.transforms.sns_envelope import SnsEnvelope

# Copies of the design's wire samples (shared/samples), kept in the repo for CI.
SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "samples"
FATAL = (400, 422)


def message(body: bytes, attributes: dict[str, str] | None = None) -> Message:
    return Message(id="m-1", queue="tasks-high", priority=0, body=body,
                   attributes=attributes or {}, attempt=2, enqueued_ms=1_764_110_000_000,
                   lease=Lease(token=None, deadline_ms=0))


def request_for(
    body: bytes,
    attributes: dict[str, str] | None = None,
    content_type: str | None = None,
    token: str = "",
) -> tuple[dict[str, object], dict[str, str]]:
    msg = message(body, attributes)
    payload = Payload(msg.body, dict(msg.attributes), content_type)
    request = build_request(msg, payload, delivery="cloudevent", api_token=token)
    return json.loads(request.body), request.headers


def test_dapr_cloudevent_is_forwarded_unchanged_plus_extensions() -> None:
    original = json.loads((SAMPLES / "dapr-cloudevent.json").read_text())
    event, headers = request_for(json.dumps(original).encode())
    assert {k: v for k, v in event.items() if k not in ("priority", "queue", "attempt")} == original
    assert (event["priority"], event["queue"], event["attempt"]) == (0, "tasks-high", 2)
    assert headers["Content-Type"] == "application/cloudevents+json"
    assert headers["traceparent"] == original["traceparent"]
    assert "tracestate" not in headers  # empty in the sample: not sent


def test_sns_envelope_sample_unwraps_to_the_published_cloudevent() -> None:
    envelope = (SAMPLES / "snssqs-body.json").read_bytes()
    payload = SnsEnvelope()(Payload(envelope))
    original = json.loads((SAMPLES / "dapr-cloudevent.json").read_text())
    assert json.loads(payload.body) == original
    assert payload.attributes == {"customer-tier": "gold"}
    event, headers = request_for(payload.body, attributes=payload.attributes)
    assert event["id"] == original["id"]
    assert headers["metadata.customer-tier"] == "gold"


def test_json_body_is_wrapped_with_data() -> None:
    event, headers = request_for(b'{"job": 1}', attributes={"tier": "gold", "bad name": "x"},
                                 token="tok")
    assert event["specversion"] == "1.0"
    assert event["id"] == "m-1"
    assert event["source"] == "priority-pubsub/tasks-high"
    assert event["type"] == "com.priority-pubsub.message"
    assert event["datacontenttype"] == "application/json"
    assert event["data"] == {"job": 1}
    assert event["time"] == "2025-11-25T22:33:20.000Z"
    assert headers["dapr-api-token"] == "tok"
    assert headers["metadata.tier"] == "gold"
    assert not any("bad name" in name for name in headers)


def test_wrapped_body_names_its_topic_and_pubsub_as_daprds_envelope() -> None:
    """components-contrib ``pubsub/envelope.go`` ``NewCloudEventsEnvelope`` sets ``topic`` and
    ``pubsubname``; apps (the FastAPI quickstart's model) require them. Native mode: the queue
    and ``app.pubsub_name``, also sent as daprd's ``pubsubname`` header."""
    for body, content_type in ((b'{"job": 1}', None), (b"\x00bin", None), (b"hi", "text/plain")):
        msg = message(body)
        request = build_request(msg, Payload(body, {}, content_type), delivery="cloudevent",
                                api_token="", pubsub_name="orderpubsub")
        event = json.loads(request.body)
        assert (event["topic"], event["pubsubname"]) == ("tasks-high", "orderpubsub")
        assert request.headers["pubsubname"] == "orderpubsub"
    default = build_request(message(b"{}"), Payload(b"{}", {}, None), delivery="cloudevent",
                            api_token="")
    assert json.loads(default.body)["pubsubname"] == default.headers["pubsubname"] == "pubsub"


def test_a_published_cloudevent_keeps_its_own_topic_but_gets_the_header() -> None:
    original = json.loads((SAMPLES / "dapr-cloudevent.json").read_text())
    msg = message(json.dumps(original).encode())
    request = build_request(msg, Payload(msg.body, {}, None), delivery="cloudevent",
                            api_token="", pubsub_name="ps")
    assert json.loads(request.body).get("topic") == original.get("topic")
    assert request.headers["pubsubname"] == "ps"
    raw = build_request(msg, Payload(msg.body, {}, None), delivery="raw", api_token="",
                        pubsub_name="ps")
    assert raw.body == msg.body
    assert raw.headers["pubsubname"] == "ps"


def test_native_delivery_http_and_grpc_name_the_same_topic_and_pubsub() -> None:
    from priority_pubsub.app.request import NativeRequestBuilder, Prepared
    from priority_pubsub.settings.config import validate_config

    settings = validate_config({"queues": [{"name": "tasks-high", "route": "/t"}],
                                "app": {"url": "http://127.0.0.1:1", "pubsub_name": "jobs"}})
    msg = message(b'{"job": 1}')
    prepared = NativeRequestBuilder(settings).prepare(msg, Payload(msg.body, {}, None))
    assert isinstance(prepared, Prepared)
    assert prepared.target is not None
    event = json.loads(prepared.request.body)
    assert (event["topic"], event["pubsubname"]) == (prepared.target.topic,
                                                     prepared.target.pubsub_name)
    assert prepared.request.headers["pubsubname"] == prepared.target.pubsub_name == "jobs"


def test_the_events_baggage_is_a_header_and_grpc_metadata_as_published() -> None:
    """Beyond daprd (which drops it up to 1.18): the event's ``baggage`` restored as the
    ``baggage`` header, raw delivery included; one a header cannot carry is left out and
    named, the event keeping it."""
    from priority_pubsub.app.channel.envelope import grpc_metadata

    sent = "tenant=acme;ttl=60,user=J%C3%B6rg"
    ce = {"specversion": "1.0", "id": "1", "source": "s", "type": "t", "baggage": sent}
    for delivery in ("cloudevent", "raw"):
        msg = message(json.dumps(ce).encode())
        request = build_request(msg, Payload(msg.body, {}, None), delivery=delivery,
                                api_token="")
        assert request.headers["baggage"] == sent
        assert ("baggage", sent) in grpc_metadata(request.headers)
    _, headers = request_for(json.dumps({**ce, "baggage": None}).encode())
    assert "baggage" not in headers
    msg = message(json.dumps({**ce, "baggage": "k=v\nx"}).encode())
    unsafe = build_request(msg, Payload(msg.body, {}, None), delivery="cloudevent",
                           api_token="")
    assert "baggage" not in unsafe.headers
    assert unsafe.adjusted_headers == ("baggage",)
    assert unsafe.event is not None
    assert unsafe.event["baggage"] == "k=v\nx"


def test_binary_body_goes_as_data_base64_and_text_as_string() -> None:
    event, _ = request_for(b"\x00\xffbinary")
    assert base64.b64decode(event["data_base64"]) == b"\x00\xffbinary"  # type: ignore[arg-type]
    assert event["datacontenttype"] == "application/octet-stream"
    event, _ = request_for(b"hello", content_type="text/plain")
    assert (event["data"], event["datacontenttype"]) == ("hello", "text/plain")


def test_raw_delivery_sends_body_as_is() -> None:
    msg = message(b"<xml/>")
    request = build_request(msg, Payload(b"<xml/>", {}, "application/xml"), delivery="raw",
                            api_token="")
    assert request.body == b"<xml/>"
    assert request.headers["Content-Type"] == "application/xml"


def test_expiration() -> None:
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    assert is_expired({"expiration": "2026-11-25T11:59:59Z"}, now)
    assert not is_expired({"expiration": "2026-11-25T12:00:01Z"}, now)
    assert not is_expired({"expiration": "not a date"}, now)
    assert not is_expired({}, now)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, b"", Kind.ACK),
        (204, b"", Kind.ACK),
        (200, b"ok", Kind.ACK),
        (200, b"[1, 2]", Kind.ACK),
        (200, b'{"status": "SUCCESS"}', Kind.ACK),
        (200, b'{"status": "success"}', Kind.ACK),
        (200, b'{"other": 1}', Kind.ACK),
        (200, b'{"status": "RETRY"}', Kind.RETRY),
        (200, b'{"status": "LATER"}', Kind.RETRY),
        (200, b'{"status": "DROP"}', Kind.DROP),
        (404, b"", Kind.DROP),
        (400, b"", Kind.DEAD),
        (422, b'{"status": "SUCCESS"}', Kind.DEAD),
        (500, b"", Kind.RETRY),
        (503, b"", Kind.RETRY),
        (301, b"", Kind.RETRY),
        (401, b"", Kind.RETRY),
    ],
)
def test_dapr_response_table(status: int, body: bytes, kind: Kind) -> None:
    outcome = classify(status, body, FATAL)
    assert outcome.kind is kind
    assert outcome.http_status == status


@pytest.mark.parametrize("answer", [b"[" * 5000 + b"]" * 5000, b'{"status": ' + b"9" * 5000 + b"}"])
def test_app_answer_python_cannot_parse_is_a_non_json_success(answer: bytes) -> None:
    assert classify(200, answer, FATAL).kind is Kind.ACK  # not an internal error


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"Type": "Notification", "Message": ' + b"[" * 5000 + b"]" * 5000 + b"}",
         "nested too deeply"),
        (b'{"Type": "Notification", "Message": "\\ud800"}', "lone surrogate"),
    ],
)
def test_sns_envelope_python_cannot_represent_is_a_transform_error(
    body: bytes, reason: str
) -> None:
    from priority_pubsub.core.errors import TransformError

    with pytest.raises(TransformError, match=reason):
        SnsEnvelope()(Payload(body))


@pytest.mark.parametrize("body", [
    (SAMPLES / "dapr-cloudevent.json").read_bytes(),  # a Dapr event, forwarded as is
    b'{"job": "render"}',  # a plain JSON body, wrapped
    b"plain text",  # text, wrapped
])
def test_every_request_is_a_valid_cloudevent_for_the_cloudevents_sdk(body: bytes) -> None:
    """The CloudEvents SDK (structured HTTP binding) is the independent judge: it refuses an
    event missing a required attribute or with a malformed one."""
    msg = message(body)
    request = build_request(msg, Payload(msg.body, {}, None), delivery="cloudevent",
                            api_token="")
    event = from_http_event(HTTPMessage(dict(request.headers), request.body))
    attributes = event.get_attributes()
    assert attributes["specversion"] == "1.0"
    assert all(attributes[key] for key in ("id", "source", "type"))
    assert (attributes["queue"], attributes["attempt"]) == ("tasks-high", 2)
