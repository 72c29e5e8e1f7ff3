"""Publishing the way Dapr's ``pubsub.aws.snssqs`` does: a CloudEvent sent through SNS.

Used by the CLI's ``publish --via-sns TOPIC_ARN`` and by the tests, so a message can take the
exact road a frontend's message takes: Dapr builds a CloudEvent, publishes it as an SNS
message, and SNS wraps it in a Notification envelope in every subscribed SQS queue.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from priority_pubsub.drivers.sqs.api import call_sns

if TYPE_CHECKING:
    from types_boto3_sns.type_defs import MessageAttributeValueTypeDef


def publish_via_sns(
    topic_arn: str,
    body: bytes | str,
    attributes: Mapping[str, str] | None = None,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
) -> str:
    """Publish ``body`` to an SNS topic (blocking); return SNS's message id.

    ``attributes`` become SNS String message attributes, which reach the SQS body's envelope
    (``MessageAttributes``) and from there, through the ``sns_envelope`` transform, the app's
    ``metadata.*`` headers. Credentials and region come from the standard AWS chain.
    Raises ``DriverError``/``DriverUnavailable`` like the driver does.
    """
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    sns_attributes: dict[str, MessageAttributeValueTypeDef] = {
        name: {"DataType": "String", "StringValue": value}
        for name, value in (attributes or {}).items()
    }
    return call_sns(
        lambda client: client.publish(
            TopicArn=topic_arn, Message=text, MessageAttributes=sns_attributes
        )["MessageId"],
        region=region,
        endpoint_url=endpoint_url,
    )


def dapr_cloudevent(
    data: Any,
    *,
    topic: str,
    pubsub_name: str = "pubsub",
    source: str = "priority-pubsub",
    traceparent: str | None = None,
) -> bytes:
    """The structured CloudEvent Dapr's publish API builds around JSON ``data``.

    Same fields as Dapr (``topic``, ``pubsubname``, ``traceid``/``traceparent``,
    ``tracestate``), so ``publish_via_sns(arn, dapr_cloudevent(...))`` reproduces a Dapr
    publisher end to end.
    """
    trace = traceparent or f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    event = {
        "id": str(uuid.uuid4()),
        "specversion": "1.0",
        "datacontenttype": "application/json",
        "source": source,
        "type": "com.dapr.event.sent",
        "topic": topic,
        "pubsubname": pubsub_name,
        "traceid": trace,
        "traceparent": trace,
        "tracestate": "",
        "data": data,
    }
    return json.dumps(event).encode("utf-8")
