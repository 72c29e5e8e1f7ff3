"""daprd's publish errors: the same HTTP status, ``errorCode``, message and details, and the
same gRPC status code and ``google.rpc`` details, so SDKs and callers see what daprd says.

Sources: dapr ``pkg/api/errors/pubsub.go`` (each error's codes and message),
``pkg/messages/errorcodes/errorcodes.go`` (``ERR_*`` tags and ``DAPR_*`` reasons), dapr/kit
``errors/errors.go`` (``JSONErrorValue``: ``{"errorCode", "message", "details"}``; a
``ResourceInfo`` detail unless skipped, then an ``ErrorInfo`` with domain ``dapr.io``),
``pkg/api/http/middlewares.go`` (401 ``invalid api token``), ``pkg/api/grpc/auth.go``.

One code is ours: ``ERR_PUBSUB_TOPIC_NOT_FOUND`` — native mode publishes to queues, and a
topic with no queue here is refused (daprd has no such error: its brokers create topics).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from priority_pubsub.core.json_text import go_json

DOMAIN = "dapr.io"
TOPIC_NOT_FOUND = "ERR_PUBSUB_TOPIC_NOT_FOUND"
INVALID_TOKEN_TEXT = "invalid api token\n"


@dataclass(frozen=True)
class DaprError(Exception):
    """One refusal, renderable as daprd's HTTP body and as its gRPC status."""

    http_status: int
    grpc_code: str
    """``grpc.StatusCode`` member name (INVALID_ARGUMENT, NOT_FOUND, INTERNAL...)."""
    error_code: str
    reason: str
    message: str
    metadata: Mapping[str, str] | None = None
    resource: str | None = None
    """The pubsub name for ``ResourceInfo``; None skips it (as ``NotFound`` does)."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def details(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if self.resource is not None:
            found.append({"@type": "type.googleapis.com/google.rpc.ResourceInfo",
                          "resource_type": "pubsub", "resource_name": self.resource,
                          "owner": "", "description": self.message})
        found.append({"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                      "reason": self.reason, "domain": DOMAIN,
                      "metadata": None if self.metadata is None else dict(self.metadata)})
        return found

    def http_body(self) -> bytes:
        """kit's ``errorJSON`` in its field order (a Go struct), details as Go maps."""
        details = ",".join(go_json(detail).decode() for detail in self.details())
        return (f'{{"errorCode":{json.dumps(self.error_code)},'
                f'"message":{go_json(self.message).decode()},"details":[{details}]}}'
                ).encode()


def not_found(pubsub: str, metadata: Mapping[str, str] | None) -> DaprError:
    return DaprError(404, "INVALID_ARGUMENT", "ERR_PUBSUB_NOT_FOUND", "DAPR_PUBSUB_NOT_FOUND",
                     f"pubsub {pubsub} is not found", metadata)


def name_empty(metadata: Mapping[str, str]) -> DaprError:
    return DaprError(404, "INVALID_ARGUMENT", "ERR_PUBSUB_EMPTY", "DAPR_PUBSUB_NAME_EMPTY",
                     "pubsub name is empty", metadata, resource="")


def topic_empty(pubsub: str, metadata: Mapping[str, str]) -> DaprError:
    return DaprError(404, "INVALID_ARGUMENT", "ERR_TOPIC_NAME_EMPTY",
                     "DAPR_PUBSUB_TOPIC_NAME_EMPTY", f"topic is empty in pubsub {pubsub}",
                     metadata, resource=pubsub)


def bad_metadata(pubsub: str, metadata: Mapping[str, str], error: str) -> DaprError:
    return DaprError(400, "INVALID_ARGUMENT", "ERR_PUBSUB_REQUEST_METADATA",
                     "DAPR_PUBSUB_METADATA_DESERIALIZATION",
                     f"failed deserializing metadata. Error: {error}", metadata, resource=pubsub)


def cloud_event_creation(pubsub: str, app_id: str, error: str) -> DaprError:
    return DaprError(500, "INVALID_ARGUMENT", "ERR_PUBSUB_CLOUD_EVENTS_SER",
                     "DAPR_PUBSUB_CLOUD_EVENT_CREATION", "cannot create cloudevent",
                     {"appID": app_id, "error": error}, resource=pubsub)


def publish_failed(pubsub: str, topic: str, error: str) -> DaprError:
    return DaprError(500, "INTERNAL", "ERR_PUBSUB_PUBLISH_MESSAGE",
                     "DAPR_PUBSUB_PUBLISH_MESSAGE",
                     f"error when publishing to topic {topic} in pubsub {pubsub}: {error}",
                     {"topic": topic, "error": error}, resource=pubsub)


def bulk_publish_failed(pubsub: str, topic: str, failed: list[tuple[str, str]]) -> DaprError:
    """daprd's gRPC answer to a bulk publish with failed entries: ``publish_failed`` of the
    first, the others enqueued. Which ones failed daprd does not say; here the ErrorInfo
    metadata's ``failedEntries`` lists their ids (JSON), so a client can tell what is in."""
    error = publish_failed(pubsub, topic, failed[0][1])
    metadata = {**(error.metadata or {}),
                "failedEntries": json.dumps([entry_id for entry_id, _ in failed])}
    return replace(error, metadata=metadata)


def unmarshal_events(pubsub: str, topic: str, app_id: str, error: str) -> DaprError:
    return DaprError(400, "INVALID_ARGUMENT", "ERR_PUBSUB_EVENTS_SER",
                     "DAPR_PUBSUB_UNMARSHAL_EVENTS",
                     f"error when unmarshaling the request for topic {topic} pubsub {pubsub}: "
                     f"{error}", {"appID": app_id}, resource=pubsub)


def marshal_events(pubsub: str, topic: str, app_id: str, error: str) -> DaprError:
    return DaprError(400, "INVALID_ARGUMENT", "ERR_PUBSUB_EVENTS_SER",
                     "DAPR_PUBSUB_MARSHAL_EVENTS",
                     f"error marshaling events to bytes for topic {topic} pubsub {pubsub}. "
                     f"error: {error}", {"appID": app_id, "error": error}, resource=pubsub)


def marshal_envelope(pubsub: str, topic: str, app_id: str, error: str) -> DaprError:
    return DaprError(400, "INVALID_ARGUMENT", "ERR_PUBSUB_EVENTS_SER",
                     "DAPR_PUBSUB_MARSHAL_ENVELOPE",
                     f"error when marshalling cloud event envelope for topic {topic} pubsub "
                     f"{pubsub}: {error}", {"appID": app_id, "error": error}, resource=pubsub)


def topic_not_found(pubsub: str, topic: str, queues: tuple[str, ...]) -> DaprError:
    """Ours (native mode): the topic names no queue of this sidecar; nothing is enqueued."""
    return DaprError(404, "NOT_FOUND", TOPIC_NOT_FOUND, "PRIORITY_PUBSUB_TOPIC_NOT_FOUND",
                     f"topic {topic} is not a queue of pubsub {pubsub} (queues: "
                     f"{', '.join(queues)})", {"topic": topic}, resource=pubsub)


def unauthenticated(detail: str) -> DaprError:
    """gRPC only (``auth.go``): HTTP answers 401 ``invalid api token`` as plain text."""
    return DaprError(401, "UNAUTHENTICATED", "", "Unauthorized", "Unauthorized",
                     {"http.code": "401", "http.error_message": detail})


def streaming(message: str, grpc_code: str) -> DaprError:
    """A streaming subscription refused (gRPC only: ``SubscribeTopicEventsAlpha1``)."""
    return DaprError(400, grpc_code, "ERR_PUBSUB_SUBSCRIBE", "DAPR_PUBSUB_SUBSCRIBE", message)
