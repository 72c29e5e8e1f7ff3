"""``sns_envelope`` on the real wire formats: Dapr's CloudEvent, SNS's Notification around it.

The two samples are the ones in the project's shared samples (what Dapr's publish API builds
and what an SQS queue subscribed to the SNS topic receives); they are inlined so the test
needs nothing outside the repository.
"""

from __future__ import annotations

import json

import pytest

from priority_pubsub.core.errors import TransformError
from priority_pubsub.transforms.base import Payload, TransformChain
from priority_pubsub.transforms.sns_envelope import SnsEnvelope

DAPR_CLOUDEVENT = {
    "id": "5929aaac-a5e2-4ca1-859c-edfe73f11565",
    "specversion": "1.0",
    "datacontenttype": "application/json",
    "source": "frontend",
    "type": "com.dapr.event.sent",
    "topic": "tasks-high",
    "pubsubname": "tasks",
    "traceid": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "",
    "data": {"job": "render-report", "customer": 42},
}
EVENT_TEXT = json.dumps(DAPR_CLOUDEVENT)  # as the sample's "Message" string holds it
SNSSQS_BODY = {
    "Type": "Notification",
    "MessageId": "6e5ae9b0-34a7-5d0a-9d63-2f0a4f3c7a11",
    "TopicArn": "arn:aws:sns:us-east-1:123456789012:tasks-high",
    "Message": EVENT_TEXT,
    "Timestamp": "2026-11-25T22:30:00.000Z",
    "SignatureVersion": "1",
    "Signature": "EXAMPLE",
    "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0.pem",
    "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
    "MessageAttributes": {"customer-tier": {"Type": "String", "Value": "gold"}},
}


def unwrap(body: bytes, attributes: dict[str, str] | None = None) -> Payload:
    return SnsEnvelope()(Payload(body, attributes or {}))


def test_envelope_yields_exactly_the_published_cloudevent() -> None:
    payload = unwrap(json.dumps(SNSSQS_BODY, indent=2).encode())
    assert payload.body == EVENT_TEXT.encode()  # byte for byte, not merely equal JSON
    assert json.loads(payload.body) == DAPR_CLOUDEVENT
    assert payload.content_type == "application/json"


def test_envelope_attributes_join_and_win_over_sqs_attributes() -> None:
    payload = unwrap(
        json.dumps(SNSSQS_BODY).encode(), {"customer-tier": "sqs", "sqs-only": "1"}
    )
    assert payload.attributes == {"customer-tier": "gold", "sqs-only": "1"}


def test_non_ascii_event_keeps_its_characters() -> None:
    event = json.dumps({**DAPR_CLOUDEVENT, "data": {"name": "Zoë ✓"}}, ensure_ascii=False)
    body = json.dumps({**SNSSQS_BODY, "Message": event}).encode()  # SNS escapes as \\u
    assert unwrap(body).body.decode("utf-8") == event


def test_raw_message_delivery_passes_the_cloudevent_through_unchanged() -> None:
    raw = EVENT_TEXT.encode()
    original = Payload(raw, {"customer-tier": "gold"}, None)
    assert SnsEnvelope()(original) is original


def test_envelope_without_attributes_is_fine() -> None:
    body = {k: v for k, v in SNSSQS_BODY.items() if k != "MessageAttributes"}
    assert unwrap(json.dumps(body).encode()).attributes == {}


def test_non_json_message_inside_an_envelope_keeps_no_content_type() -> None:
    payload = unwrap(json.dumps({**SNSSQS_BODY, "Message": "hello"}).encode())
    assert (payload.body, payload.content_type) == (b"hello", None)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"plain text", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"hello": "world"}', "neither an SNS Notification"),
        (b"[1, 2]", "neither an SNS Notification"),
        (json.dumps({**SNSSQS_BODY, "Type": "SubscriptionConfirmation"}).encode(), "neither"),
        (json.dumps({**SNSSQS_BODY, "Message": {"not": "a string"}}).encode(), "no string"),
        (json.dumps({**SNSSQS_BODY, "MessageAttributes": ["x"]}).encode(), "not an object"),
        # a CloudEvent needs all four required attributes to pass as raw delivery
        (json.dumps({"id": "1", "source": "s", "type": "t"}).encode(), "neither"),
    ],
)
def test_anything_else_is_a_transform_error_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(TransformError, match=reason):
        unwrap(body)


def test_chain_names_the_failing_transform() -> None:
    with pytest.raises(TransformError, match=r"^sns_envelope: body is not JSON"):
        TransformChain([SnsEnvelope()])(Payload(b"nope"))
