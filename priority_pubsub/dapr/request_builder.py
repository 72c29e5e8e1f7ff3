"""The request daprd's HTTP subscriber sends for one message, byte for byte.

Sources: dapr ``pkg/runtime/subscription/subscription.go`` (the handler passed to the
component's ``Subscribe``) and ``postman/http/http.go`` (``Deliver``), components-contrib
``pubsub/envelope.go`` (``FromRawPayload``, ``HasExpired``):

- the body is the message data exactly as published; with ``rawPayload`` it is
  ``FromRawPayload``'s CloudEvent (``data_base64``, a new random id) as Go's ``json.Marshal``
  writes it;
- otherwise the data must parse as a JSON object (else retried, or sent to the dead-letter
  topic); that object is the event CEL rules and the expiration see, never re-serialised;
- ``Content-Type: application/cloudevents+json``; every metadata entry of the message as a
  lower-case header (``pubsubname`` = the component's name; Service Bus ``metadata.*``);
  ``traceparent``/``tracestate`` from the event, and its ``baggage`` (beyond daprd, which
  drops it up to 1.18: dapr #10302, the header dapr #10385 restores);
- expired events are dropped; no matching rule drops the event (to the dead-letter topic if
  the subscription has one).
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from priority_pubsub.app.channel.streams import StreamHub
from priority_pubsub.app.cloudevent import (
    CLOUDEVENT_CONTENT_TYPE,
    copy_trace_headers,
    is_expired,
    metadata_headers,
)
from priority_pubsub.app.request import Prepared, Target
from priority_pubsub.core import json_text
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.errors import TransformError
from priority_pubsub.core.json_text import go_json
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.dapr.plan import DaprPlan, PlannedQueue
from priority_pubsub.dapr.routing import RoutingError, app_path, choose_path
from priority_pubsub.dapr.subscriptions import Subscription, streaming
from priority_pubsub.settings.config import AppConfig
from priority_pubsub.transforms.base import Payload

PUBSUB_METADATA_KEY = "pubsubName"
"""dapr ``pkg/runtime/pubsub/subscriptions.go`` ``MetadataKeyPubSub``; a header in lower case."""
_NOT_FORWARDED = {"content-type", "content-length", "traceparent", "tracestate"}
_TRACE_FIELDS = ("traceid", "traceparent", "tracestate")


@dataclass(frozen=True, slots=True)
class Decoded:
    """One message as daprd's runtime receives it from the component."""

    data: bytes
    topic: str
    metadata: dict[str, str]
    subscription: Subscription
    content_type: str | None = None
    """The component's (``NewMessage.ContentType``), where it gives one."""


class DaprRequestBuilder:
    """Dapr mode's request builder: each message decoded as daprd's runtime receives it,
    matched to its subscription, and sent as daprd's HTTP subscriber would send it."""

    def __init__(self, plan: DaprPlan, app: AppConfig, streams: StreamHub | None = None
                 ) -> None:
        self._plan = plan
        self._base_url = app.url.get_secret_value().rstrip("/")
        self._token = app.api_token.get_secret_value()
        self._streams = streams
        """Streaming subscriptions: a stream's own dead-letter topic is its topic's."""

    def add_topic(self, topic: str, queue: str) -> None:
        """A topic known only from a stream, read from ``queue`` (the lowest priority):
        delivered as a subscription with one default route."""
        plan = self._plan
        queues = list(plan.queues)
        for index, planned in enumerate(queues):
            if planned.name == queue:  # the shared layout: one more topic on its queue
                queues[index] = dataclasses.replace(planned, topics=(*planned.topics, topic))
                break
        else:
            queues.append(PlannedQueue(queue, (topic,)))
        subscriptions = {**plan.subscriptions, topic: streaming(plan.component.name, topic)}
        self._plan = dataclasses.replace(plan, queues=tuple(queues), subscriptions=subscriptions)

    def use_plan(self, plan: DaprPlan) -> None:
        """A live reload's plan: its subscriptions' routes, rules and dead-letter topics from
        now on. A topic it no longer has keeps its subscription (what is in flight from it is
        delivered and settled as it would have been; nothing more is taken from it), and so
        does a topic only a stream knows."""
        before = self._plan
        kept = {topic: subscription for topic, subscription in before.subscriptions.items()
                if topic not in plan.subscriptions}
        queues = list(plan.queues)
        for planned in before.queues:
            gone = tuple(topic for topic in planned.topics if topic in kept)
            if not gone:
                continue
            for index, queue in enumerate(queues):
                if queue.name == planned.name:  # the shared layout: still its queue
                    queues[index] = dataclasses.replace(queue, topics=(*queue.topics, *gone))
                    break
            else:
                queues.append(dataclasses.replace(planned, topics=gone))
        self._plan = dataclasses.replace(plan, queues=tuple(queues),
                                         subscriptions={**plan.subscriptions, **kept})

    def decode(self, message: Message, payload: Payload) -> Decoded | Outcome:
        """Unwrap the broker's body and find the subscription (shared by dead-lettering)."""
        plan = self._plan
        try:
            unwrapped = plan.kind.unwrap(plan.component, payload)
        except TransformError as exc:
            return Outcome.dead(f"{plan.component.type}: {exc}")
        topic = plan.topic_of(message.queue, unwrapped.topic_key)
        if topic is None:
            return Outcome.dead(f"no subscription for topic {unwrapped.topic_key!r} on queue "
                                f"{message.queue}")
        # the broker's system properties after the publisher's, as daprd's Service Bus
        # component sets them (message_pubsub.go addMessageAttributesToMetadata)
        system = {f"metadata.{name}": value for name, value in message.broker_properties.items()}
        metadata = {**unwrapped.metadata, **system, PUBSUB_METADATA_KEY: plan.component.name}
        subscription = plan.subscriptions[topic]
        if self._streams is not None and (
                dead_letters := self._streams.dead_letter_topic(topic)) is not None:
            # the stream's own deadLetterTopic (its initial request), as daprd's streaming
            # subscription carries its own
            subscription = dataclasses.replace(subscription, dead_letter_topic=dead_letters)
        return Decoded(unwrapped.data, topic, metadata, subscription, unwrapped.content_type)

    def prepare(self, message: Message, payload: Payload) -> Prepared | Outcome:
        decoded = self.decode(message, payload)
        if isinstance(decoded, Outcome):
            return decoded
        subscription = decoded.subscription
        try:
            event, body = self._event_and_body(decoded)
            if is_expired(event, datetime.now(UTC)):
                return Outcome.drop("expired: CloudEvent expiration has passed")
            path = choose_path(subscription.compiled_rules, event)
        except (ValueError, RoutingError) as exc:
            reason = f"topic {decoded.topic}: {exc}"
            # daprd: to the dead-letter topic when there is one, else an error (redelivered)
            if subscription.dead_letter_topic:
                return Outcome.dead(reason)
            return Outcome.retry(reason)
        if path is None:
            return Outcome.drop(f"topic {decoded.topic}: no route matched")
        headers, adjusted = self._headers(decoded.metadata, event)
        target = Target(self._plan.component.name, decoded.topic, path)
        raw = decoded.data if subscription.raw_payload else None
        return Prepared(self._base_url + app_path(path),
                        AppRequest(body, headers, event, adjusted), target, raw,
                        decoded.content_type)

    def _event_and_body(self, decoded: Decoded) -> tuple[dict[str, Any], bytes]:
        if decoded.subscription.raw_payload:
            event = from_raw_payload(decoded.data, decoded.topic, self._plan.component.name)
            for name in _TRACE_FIELDS:
                if name in decoded.metadata:
                    event[name] = decoded.metadata[name]
            if "traceparent" in decoded.metadata:  # traceparent supersedes traceid
                event["traceid"] = decoded.metadata["traceparent"]
            return event, go_json(event)
        try:
            event = json_text.parse(decoded.data)  # nesting past Python's limit included
        except json_text.JsonUnreadable as exc:
            raise ValueError(f"error deserializing cloud event: {exc}") from None
        if not isinstance(event, dict):
            raise ValueError("error deserializing cloud event: not a JSON object")
        for name in _TRACE_FIELDS:  # metadata fills what the event lacks (routing only)
            if name not in event and name in decoded.metadata:
                event[name] = decoded.metadata[name]
        return event, decoded.data

    def _headers(
        self, metadata: dict[str, str], event: dict[str, Any]
    ) -> tuple[dict[str, str], tuple[str, ...]]:
        """The headers, and those made safe or left out (a value HTTP cannot carry: see
        ``cloudevent.metadata_headers``; a trace header holding one is left out)."""
        lowered = {key.lower(): value for key, value in metadata.items()
                   if key.lower() not in _NOT_FORWARDED}
        headers, adjusted = metadata_headers(lowered, prefix="")
        trace = event.get("traceparent") or event.get("traceid")
        context = {"traceparent": trace, "tracestate": event.get("tracestate") if trace else None,
                   "baggage": event.get("baggage")}
        adjusted += copy_trace_headers(context, headers)
        headers["Content-Type"] = CLOUDEVENT_CONTENT_TYPE
        if self._token:
            headers["dapr-api-token"] = self._token
        return headers, adjusted


def from_raw_payload(data: bytes, topic: str, pubsub: str) -> dict[str, Any]:
    """components-contrib ``pubsub.FromRawPayload``: the subscriber-side CloudEvent of a raw
    payload (random id, ``data_base64``, ``application/octet-stream``)."""
    return {
        "id": str(uuid.uuid4()),
        "specversion": "1.0",
        "datacontenttype": "application/octet-stream",
        "source": "Dapr",
        "type": "com.dapr.event.sent",
        "topic": topic,
        "pubsubname": pubsub,
        "data_base64": base64.b64encode(data).decode("ascii"),
    }
