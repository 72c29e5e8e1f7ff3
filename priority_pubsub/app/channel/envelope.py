"""The ``TopicEventRequest`` daprd sends a gRPC app for one event, and the gRPC metadata that
goes with it — pure functions over the prepared request, so every field is unit-testable.

Source: dapr ``pkg/runtime/pubsub/subscriptions.go`` ``GRPCEnvelopeFromSubscriptionMessage``
and ``ExtractCloudEventExtensions``; ``pkg/messaging/v1/util.go`` ``WithCustomGRPCMetadata``:

- ``id``, ``source``, ``type``, ``spec_version``, ``data_content_type``: the event's string
  fields ("" when absent or not a string);
- ``data``: ``data_base64`` decoded; else ``data`` as UTF-8 when the content type is text
  (``text/*``, ``application/xml``), or as JSON (Go's ``json.Marshal``) when it is JSON or
  CloudEvents JSON; any other content type sends no data (daprd does the same);
- ``extensions``: every other field of the event, as a ``google.protobuf.Struct``;
- ``topic``, ``pubsub_name``, ``path``: the subscription's (``Target``);
- metadata: the message metadata daprd passes (lower-case keys; no content type or length)
  and ``dapr-api-token`` — here the same headers the HTTP delivery sends.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import TYPE_CHECKING, Any

from priority_pubsub.app.channel.bulk import BULK_EVENT_TYPE, Batch
from priority_pubsub.app.request import Prepared, Target
from priority_pubsub.core.json_text import go_json

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventBulkRequest, TopicEventRequest

DUPLICATED_FIELDS = frozenset(
    {"id", "source", "datacontenttype", "type", "specversion", "data", "data_base64"})
"""dapr ``cloudEventDuplicateKeys``: sent as fields, so not repeated in ``extensions``."""
_NOT_METADATA = frozenset({"content-type", "content-length"})
_METADATA_KEY = re.compile(r"^[0-9a-z_.-]+$")
_PRINTABLE_ASCII = re.compile(r"^[\x20-\x7e]*$")


class EnvelopeError(ValueError):
    """The event cannot become a request (daprd: an error, so the event is retried)."""


def topic_event_request(prepared: Prepared) -> TopicEventRequest:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventRequest

    target = prepared.target or Target("", "")
    event = prepared.request.event
    if event is None:  # raw delivery: the body as published
        return TopicEventRequest(
            data=prepared.request.body, topic=target.topic, pubsub_name=target.pubsub_name,
            path=target.path,
            data_content_type=prepared.request.headers.get("Content-Type", ""))
    request = TopicEventRequest(
        id=_text(event, "id"), source=_text(event, "source"), type=_text(event, "type"),
        spec_version=_text(event, "specversion"),
        data_content_type=_text(event, "datacontenttype"),
        topic=target.topic, pubsub_name=target.pubsub_name, path=target.path,
        data=event_data(event))
    request.extensions.update(
        {key: value for key, value in event.items() if key not in DUPLICATED_FIELDS})
    return request


def topic_event_bulk_request(batch: Batch) -> TopicEventBulkRequest:
    """A batch as daprd's gRPC bulk request: each entry's CloudEvent as
    ``TopicEventCERequest``, or with ``rawPayload`` its data as ``bytes``
    (``postman/grpc/grpc.go`` ``DeliverBulk``, ``pkg/runtime/pubsub`` ``FetchEntry``)."""
    from dapr.proto.runtime.v1.appcallback_pb2 import (
        TopicEventBulkRequest,
        TopicEventBulkRequestEntry,
        TopicEventCERequest,
    )

    entries = []
    for entry in batch.entries:
        # daprd's ``FetchEntry``: the entry's content type is the component's ("" if none)
        content_type = entry.prepared.content_type or ""
        if entry.prepared.raw is not None:  # rawPayload: the data as published
            entries.append(TopicEventBulkRequestEntry(
                entry_id=entry.entry_id, bytes=entry.prepared.raw, content_type=content_type,
                metadata=entry.metadata))
            continue
        single = topic_event_request(entry.prepared)
        cloud_event = TopicEventCERequest(
            id=single.id, source=single.source, type=single.type,
            spec_version=single.spec_version, data_content_type=single.data_content_type,
            data=single.data, extensions=single.extensions)
        entries.append(TopicEventBulkRequestEntry(
            entry_id=entry.entry_id, cloud_event=cloud_event,
            content_type=content_type, metadata=entry.metadata))
    return TopicEventBulkRequest(
        id=batch.id, entries=entries, metadata={"pubsubName": batch.pubsub},
        topic=batch.topic, pubsub_name=batch.pubsub, type=BULK_EVENT_TYPE, path=batch.path)


def event_data(event: dict[str, Any]) -> bytes:
    encoded = event.get("data_base64")
    if encoded is not None:
        if not isinstance(encoded, str):
            raise EnvelopeError("unexpected data type encountered in envelope")
        try:
            return base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise EnvelopeError(f"data_base64 is not base64: {exc}") from None
    data = event.get("data")
    if data is None:
        return b""
    content_type = _text(event, "datacontenttype")
    if is_text_type(content_type):
        if not isinstance(data, str):
            raise EnvelopeError("unexpected data type encountered in envelope")
        return data.encode("utf-8")
    if media_type(content_type) in ("application/json", "application/cloudevents+json"):
        return go_json(data)
    return b""


def grpc_metadata(headers: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Headers as gRPC metadata: lower-case keys; entries gRPC cannot carry are left out."""
    pairs = []
    for name, value in headers.items():
        key = name.lower()
        if key in _NOT_METADATA or not _METADATA_KEY.match(key) or key.endswith("-bin"):
            continue
        if _PRINTABLE_ASCII.match(value):
            pairs.append((key, value))
    return tuple(pairs)


def media_type(content_type: str) -> str:
    """components-contrib ``isContentType``: lower case, parameters after ';' ignored."""
    return content_type.lower().split(";", 1)[0]


def is_text_type(content_type: str) -> bool:
    """components-contrib ``IsStringContentType``."""
    return content_type.lower().startswith("text/") or media_type(content_type) == \
        "application/xml"


def _text(event: dict[str, Any], key: str) -> str:
    value = event.get(key)
    return value if isinstance(value, str) else ""
