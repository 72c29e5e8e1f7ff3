"""The publish API's CloudEvent and error bodies, rule by rule, against daprd's source:
dapr ``pkg/runtime/pubsub/cloudevents.go`` (``NewCloudEvent``), components-contrib
``pubsub/envelope.go`` (``NewCloudEventsEnvelope``, ``FromCloudEvent``, ``ApplyMetadata``),
``metadata/utils.go`` (``IsRawPayload``, ``TryGetTTL``), dapr ``pkg/api/http/util.go``
(``ConvertEventToBytes``), ``pkg/api/errors/pubsub.go`` and dapr/kit ``errors/errors.go``
(``JSONErrorValue``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from priority_pubsub.publish_api import errors
from priority_pubsub.publish_api.envelope import (
    EnvelopeError,
    MetadataError,
    Trace,
    apply_ttl,
    build_event,
    bulk_entry_bytes,
    is_raw_payload,
    serialise,
    ttl_s,
)

NOW = datetime(2026, 5, 4, 3, 2, 1, 987654, tzinfo=UTC)
TRACE = Trace("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "congo=t61rcWkgMzE")


def event(body: bytes, content_type: str, **metadata: str) -> dict[str, object]:
    return build_event(body, content_type, topic="orders", pubsub_name="orderpubsub",
                       source="checkout", metadata=metadata, trace=TRACE, now=NOW)


def test_json_body_is_wrapped_with_every_field_daprd_sets() -> None:
    built = event(b'{"orderId": 1}', "application/json")
    assert set(built) == {"id", "specversion", "datacontenttype", "source", "type", "topic",
                          "pubsubname", "traceid", "traceparent", "tracestate", "time", "data"}
    assert built["data"] == {"orderId": 1}
    assert (built["source"], built["type"], built["specversion"]) == (
        "checkout", "com.dapr.event.sent", "1.0")
    assert (built["topic"], built["pubsubname"]) == ("orders", "orderpubsub")
    assert built["traceid"] == built["traceparent"] == TRACE.parent
    assert built["tracestate"] == TRACE.state
    assert built["time"] == "2026-05-04T03:02:01Z"  # Go's time.RFC3339: seconds
    assert len(str(built["id"])) == 36


def test_invalid_json_as_application_json_is_published_as_text() -> None:
    assert event(b'{"orderId": ', "application/json")["data"] == '{"orderId": '


def test_only_the_first_json_value_is_read_as_go_decoder_does() -> None:
    assert event(b'{"a": 1} trailing', "application/json")["data"] == {"a": 1}


def test_no_content_type_is_text_plain_and_binary_is_base64() -> None:
    assert event(b"hello", "")["datacontenttype"] == "text/plain"
    assert event(b"hello", "")["data"] == "hello"
    binary = event(b"\x00\x01", "application/octet-stream")
    assert binary["data_base64"] == "AAE="
    assert "data" not in binary


def test_cloudevent_body_is_kept_with_topic_and_pubsub_overwritten() -> None:
    body = json.dumps({"specversion": "1.0", "id": "abc-8", "source": "my-service",
                       "type": "com.example.event", "data": {"id": 8}, "topic": "x"}).encode()
    kept = event(body, "application/cloudevents+json")
    assert (kept["id"], kept["source"], kept["type"]) == ("abc-8", "my-service",
                                                           "com.example.event")
    assert (kept["topic"], kept["pubsubname"]) == ("orders", "orderpubsub")
    assert kept["traceid"] == kept["traceparent"] == TRACE.parent
    assert kept["time"] == "2026-05-04T03:02:01Z"


def test_cloudevent_defaults_fill_only_missing_fields() -> None:
    kept = event(b'{"data": 1, "time": "2020-01-01T00:00:00Z", "traceid": "t"}',
                 "application/cloudevents+json")
    assert (kept["source"], kept["type"], kept["specversion"]) == (
        "Dapr", "com.dapr.event.sent", "1.0")
    assert kept["time"] == "2020-01-01T00:00:00Z"
    assert kept["traceid"] == "t"
    assert "traceparent" not in kept


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b""])
def test_invalid_cloudevent_body_is_refused(body: bytes) -> None:
    with pytest.raises(EnvelopeError):
        event(body, "application/cloudevents+json")


def test_cloudevent_metadata_overrides_the_envelope_case_insensitively() -> None:
    built = event(b"x", "text/plain", **{"cloudevent.ID": "my-id", "cloudevent.type": "t.x",
                                         "cloudevent.traceparent": "00-aa-bb-01",
                                         "cloudevent.subject": "s"})
    assert (built["id"], built["type"], built["subject"]) == ("my-id", "t.x", "s")
    assert built["traceid"] == built["traceparent"] == "00-aa-bb-01"


def test_the_publishers_baggage_rides_in_the_event_as_sent() -> None:
    """dapr #10385's ``baggage`` field, byte for byte (never re-encoded); none, no field."""
    sent = "tenant=acme;ttl=60,user=J%C3%B6rg"
    with_baggage = Trace(TRACE.parent, TRACE.state, sent)
    for content_type, body in (("application/json", b"{}"), ("text/plain", b"x"),
                               ("application/cloudevents+json", b'{"id": "1", "data": 2}')):
        built = build_event(body, content_type, topic="orders", pubsub_name="p", source="s",
                            metadata={}, trace=with_baggage, now=NOW)
        assert built["baggage"] == sent
        assert serialise(built).count(b'"baggage":"tenant=acme;ttl=60,user=J%C3%B6rg"') == 1
        assert "baggage" not in event(body, content_type)  # TRACE has none


def test_a_cloudevent_body_keeps_its_own_baggage() -> None:
    """As for ``tracestate``: what the publisher put in its event wins over the header."""
    kept = build_event(b'{"baggage": "from=event"}', "application/cloudevents+json",
                       topic="orders", pubsub_name="p", source="s", metadata={},
                       trace=Trace(baggage="from=header"), now=NOW)
    assert kept["baggage"] == "from=event"


def test_ttl_becomes_expiration() -> None:
    built = event(b"{}", "application/json")
    apply_ttl(built, {"ttlInSeconds": "90"}, now=NOW)
    assert built["expiration"] == "2026-05-04T03:03:31Z"
    assert ttl_s({"ttlInSeconds": "1m30s"}) == 90
    assert ttl_s({"ttlInSeconds": "-3"}) is None  # TryGetTTL's error: ignored, as daprd does
    assert ttl_s({"ttlInSeconds": "soon"}) is None


def test_raw_payload_is_go_parse_bool() -> None:
    assert is_raw_payload({"rawPayload": "True"}) is True
    assert is_raw_payload({"rawPayload": "0"}) is False
    assert is_raw_payload({}) is False
    with pytest.raises(MetadataError):
        is_raw_payload({"rawPayload": "yes"})


def test_serialised_as_go_marshals_a_map() -> None:
    data = serialise({"b": "<&>", "a": 1})
    assert data == b'{"a":1,"b":"\\u003c\\u0026\\u003e"}'


def test_bulk_entry_bytes_by_content_type() -> None:
    assert bulk_entry_bytes({"b": 1, "a": 2}, "application/json") == b'{"a":2,"b":1}'
    assert bulk_entry_bytes("hi", "text/plain") == b"hi"
    assert bulk_entry_bytes("AAE=", "application/octet-stream") == b"\x00\x01"
    with pytest.raises(EnvelopeError, match="mismatch"):
        bulk_entry_bytes({"a": 1}, "text/plain")
    with pytest.raises(EnvelopeError, match="mismatch"):
        bulk_entry_bytes("x", "image/png")


def test_not_found_body_is_daprds() -> None:
    error = errors.not_found("nope", {})
    assert error.http_status == 404
    assert json.loads(error.http_body()) == {
        "errorCode": "ERR_PUBSUB_NOT_FOUND", "message": "pubsub nope is not found",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "domain": "dapr.io",
                     "metadata": {}, "reason": "DAPR_PUBSUB_NOT_FOUND"}]}
    assert error.http_body().startswith(b'{"errorCode":"ERR_PUBSUB_NOT_FOUND","message":')


def test_publish_failure_carries_resource_info_first() -> None:
    body = json.loads(errors.publish_failed("p", "t", "stream too large").http_body())
    assert body["errorCode"] == "ERR_PUBSUB_PUBLISH_MESSAGE"
    assert body["message"] == "error when publishing to topic t in pubsub p: stream too large"
    assert [d["@type"].rsplit(".", 1)[1] for d in body["details"]] == ["ResourceInfo",
                                                                        "ErrorInfo"]
    assert body["details"][1]["metadata"] == {"topic": "t", "error": "stream too large"}
