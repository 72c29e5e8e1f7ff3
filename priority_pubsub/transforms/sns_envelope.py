"""``sns_envelope``: unwrap the SNS Notification that SQS receives from an SNS subscription.

Dapr's ``pubsub.aws.snssqs`` publishes through SNS, so with raw message delivery off each SQS
body is ``{"Type": "Notification", "Message": "<the CloudEvent as a string>",
"MessageAttributes": {name: {"Type", "Value"}}}``. With ``RawMessageDelivery=true`` the body
is the published message itself (a CloudEvent) and passes through unchanged. Anything else is
a ``TransformError``: the message is dead-lettered with the reason.
"""

from __future__ import annotations

from typing import Any

from priority_pubsub.core import json_text
from priority_pubsub.core.errors import TransformError
from priority_pubsub.transforms.base import Payload

_CLOUDEVENT_KEYS = frozenset({"specversion", "id", "source", "type"})


class SnsEnvelope:
    name = "sns_envelope"

    def __call__(self, payload: Payload) -> Payload:
        document = _parse_json(payload.body)
        if isinstance(document, dict) and document.get("Type") == "Notification":
            return _unwrap(document, payload)
        if isinstance(document, dict) and document.keys() >= _CLOUDEVENT_KEYS:
            return payload  # raw message delivery: already the published CloudEvent
        raise TransformError(
            "body is neither an SNS Notification envelope nor a CloudEvent (raw delivery)"
        )


def _parse_json(body: bytes) -> Any:
    try:
        return json_text.parse(body)
    except json_text.JsonUnreadable as exc:
        raise TransformError(f"body is not JSON: {exc}") from None


def _unwrap(envelope: dict[str, Any], payload: Payload) -> Payload:
    message = envelope.get("Message")
    if not isinstance(message, str):
        raise TransformError("SNS envelope has no string 'Message'")
    attributes = dict(payload.attributes)
    raw_attributes = envelope.get("MessageAttributes") or {}
    if not isinstance(raw_attributes, dict):
        raise TransformError("SNS envelope 'MessageAttributes' is not an object")
    for name, attribute in raw_attributes.items():
        if isinstance(attribute, dict) and "Value" in attribute:
            attributes[str(name)] = str(attribute["Value"])
    content_type = payload.content_type
    stripped = message.lstrip()
    if stripped.startswith(("{", "[")):
        content_type = content_type or "application/json"
    try:
        body = message.encode("utf-8")
    except UnicodeEncodeError:
        raise TransformError("SNS 'Message' holds a lone surrogate: not valid Unicode") from None
    return Payload(body, attributes, content_type)
