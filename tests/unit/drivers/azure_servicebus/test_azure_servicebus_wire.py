"""Service Bus system properties as daprd's component puts them in the metadata, and the
``metadata.*`` headers Dapr mode sends for them.

Source: components-contrib ``common/component/azure/servicebus/message_pubsub.go``
``addMessageAttributesToMetadata`` (application properties first, then ``metadata.MessageId``,
``SessionId`` when present, ``CorrelationId``/``Label``/``ReplyTo``/``To``/``ContentType`` when
non-empty, ``LockToken`` base64, ``DeliveryCount`` always, ``EnqueuedTimeUtc``/
``ScheduledEnqueueTimeUtc``/``LockedUntilUtc`` in Go's ``http.TimeFormat``, ``SequenceNumber``,
``PartitionKey``); key names from ``message.go``; Go's SDK counts deliveries from 1
(azservicebus ``newReceivedMessage``: ``Header.DeliveryCount + 1``). The SDK message is the real
``azure-servicebus`` class, built from the AMQP frame a broker sends.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from pathlib import Path

from azure.servicebus._common.message import ServiceBusReceivedMessage
from azure.servicebus._pyamqp.message import Header, Properties
from azure.servicebus._pyamqp.message import Message as AmqpMessage

from priority_pubsub.app.request import Prepared
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.dapr.request_builder import DaprRequestBuilder
from priority_pubsub.drivers.azure_servicebus.wire import system_properties
from priority_pubsub.settings.config import AppConfig
from priority_pubsub.transforms.base import Payload
from tests.unit.dapr.test_plan import plan_for

ENQUEUED = dt.datetime(2025, 11, 25, 22, 33, 20, tzinfo=dt.UTC)
DELIVERY_TAG = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").bytes
COMPONENT = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
             "metadata": {"name": "sb"},
             "spec": {"type": "pubsub.azure.servicebus.queues", "version": "v1", "metadata": [
                 {"name": "connectionString",
                  "value": "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=k;"
                           "SharedAccessKey=a2V5"}]}}


def received(*, session: bytes | None = b"sess", correlation: bytes | None = b"corr"
             ) -> ServiceBusReceivedMessage:
    ms = int(ENQUEUED.timestamp() * 1000)
    amqp = AmqpMessage(
        data=[b"{}"], header=Header(delivery_count=2),
        properties=Properties(message_id=b"m-1", correlation_id=correlation, subject=b"lbl",
                              reply_to=b"replies", to=b"someone",
                              content_type=b"application/json", group_id=session),
        application_properties={b"tier": b"gold"},
        message_annotations={b"x-opt-enqueued-time": ms, b"x-opt-sequence-number": 42,
                             b"x-opt-locked-until": ms + 60_000})
    return ServiceBusReceivedMessage(amqp, frame=[0, 7, DELIVERY_TAG], receiver=None)


def test_system_properties_named_and_formatted_as_daprds_component() -> None:
    assert system_properties(received()) == {
        "MessageId": "m-1", "CorrelationId": "corr", "SessionId": "sess", "Label": "lbl",
        "ReplyTo": "replies", "To": "someone", "ContentType": "application/json",
        "DeliveryCount": "3", "SequenceNumber": "42",
        "EnqueuedTimeUtc": "Tue, 25 Nov 2025 22:33:20 GMT",
        "LockedUntilUtc": "Tue, 25 Nov 2025 22:34:20 GMT",
        "LockToken": base64.b64encode(DELIVERY_TAG).decode(),  # the tag's wire bytes
    }


def test_absent_properties_are_left_out_but_delivery_count_always_set() -> None:
    found = system_properties(received(session=None, correlation=None))
    assert "SessionId" not in found
    assert "CorrelationId" not in found
    assert found["DeliveryCount"] == "3"


def test_dapr_mode_sends_them_as_metadata_headers_after_the_publishers(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, app=[{"pubsubname": "sb", "topic": "orders",
                                              "route": "/orders"}])
    body = json.dumps({"specversion": "1.0", "id": "1", "source": "s", "type": "t"}).encode()
    message = Message("m-1", "orders", 0, body, {"tier": "gold", "MessageId": "spoofed"}, 3, 0,
                      Lease(None, 0), broker_properties=system_properties(received()))
    prepared = DaprRequestBuilder(plan, AppConfig(url="http://app:3000")).prepare(
        message, Payload(body, dict(message.attributes)))
    assert isinstance(prepared, Prepared)
    headers = prepared.request.headers
    assert headers["metadata.tier"] == "gold"
    assert headers["metadata.messageid"] == "m-1"  # the system property wins, as in daprd
    assert headers["metadata.deliverycount"] == "3"
    assert headers["metadata.enqueuedtimeutc"] == "Tue, 25 Nov 2025 22:33:20 GMT"
    assert headers["metadata.label"] == "lbl"
    assert headers["pubsubname"] == "sb"
    assert prepared.request.body == body  # unchanged
