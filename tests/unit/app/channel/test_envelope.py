"""``TopicEventRequest`` as daprd fills it (dapr ``pkg/runtime/pubsub/subscriptions.go``
``GRPCEnvelopeFromSubscriptionMessage``, ``ExtractCloudEventExtensions``;
``pkg/runtime/subscription/postman/grpc/grpc.go`` for the statuses), built from the same
prepared request both delivery modes produce."""

from __future__ import annotations

import base64

import pytest
from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventResponse

from priority_pubsub.app.channel.envelope import EnvelopeError, grpc_metadata, topic_event_request
from priority_pubsub.app.channel.grpc import status_outcome
from priority_pubsub.app.request import Prepared, Target
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.outcome import Kind
from priority_pubsub.dapr.discovery import subscriptions_from_grpc


def prepared(event: dict[str, object], headers: dict[str, str] | None = None) -> Prepared:
    return Prepared("grpc://x:1", AppRequest(b"", headers or {}, event),
                    Target("orderpubsub", "orders", "orders-route"))


DAPR_EVENT = {"id": "e1", "source": "checkout", "type": "com.dapr.event.sent",
              "specversion": "1.0", "datacontenttype": "application/json",
              "data": {"orderId": 7, "b": "<x>"}, "topic": "orders", "pubsubname": "orderpubsub",
              "traceid": "00-t-s-01", "traceparent": "00-t-s-01", "tracestate": "",
              "time": "2026-01-01T00:00:00Z"}


def test_fields_data_and_extensions() -> None:
    request = topic_event_request(prepared(DAPR_EVENT))
    assert (request.id, request.source, request.type, request.spec_version,
            request.data_content_type) == ("e1", "checkout", "com.dapr.event.sent", "1.0",
                                           "application/json")
    assert (request.topic, request.pubsub_name, request.path) == (
        "orders", "orderpubsub", "orders-route")
    assert request.data == b'{"b":"\\u003cx\\u003e","orderId":7}'  # Go's json.Marshal
    assert dict(request.extensions) == {"topic": "orders", "pubsubname": "orderpubsub",
                                        "traceid": "00-t-s-01", "traceparent": "00-t-s-01",
                                        "tracestate": "", "time": "2026-01-01T00:00:00Z"}


def test_text_base64_and_unknown_content_types() -> None:
    text = {**DAPR_EVENT, "datacontenttype": "text/plain", "data": "hello"}
    assert topic_event_request(prepared(text)).data == b"hello"
    binary = {**DAPR_EVENT, "data_base64": base64.b64encode(b"\x00\x01").decode()}
    del binary["data"]
    assert topic_event_request(prepared(binary)).data == b"\x00\x01"
    other = {**DAPR_EVENT, "datacontenttype": "image/png"}
    assert topic_event_request(prepared(other)).data == b""  # daprd sends no data either
    with pytest.raises(EnvelopeError):
        topic_event_request(prepared({**DAPR_EVENT, "datacontenttype": "text/plain"}))


def test_metadata_is_lower_case_without_content_type() -> None:
    pairs = grpc_metadata({"pubsubname": "p", "Content-Type": "x", "dapr-api-token": "t",
                           "metadata.Bad Name": "v", "traceparent": "00-a-b-01",
                           "metadata.ünicode": "x", "metadata.k": "caf\u00e9"})
    assert pairs == (("pubsubname", "p"), ("dapr-api-token", "t"),
                     ("traceparent", "00-a-b-01"))


def test_statuses_map_as_daprd_maps_them() -> None:
    assert status_outcome(TopicEventResponse.SUCCESS).kind is Kind.ACK
    assert status_outcome(TopicEventResponse.RETRY).kind is Kind.RETRY
    assert status_outcome(TopicEventResponse.DROP).kind is Kind.DROP
    assert status_outcome(9).kind is Kind.RETRY


def test_subscriptions_without_routes_get_daprds_default_rule() -> None:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicRoutes, TopicRule, TopicSubscription

    found = subscriptions_from_grpc([
        TopicSubscription(pubsub_name="pubsub", topic="A"),
        TopicSubscription(pubsub_name="pubsub", topic="D", dead_letter_topic="D_DEAD",
                          routes=TopicRoutes(rules=[TopicRule(match='event.type == "x"',
                                                              path="x")], default="d")),
    ])
    assert [(r.match, r.path) for r in found[0].rules] == [("", "")]
    assert [(r.match, r.path) for r in found[1].rules] == [('event.type == "x"', "x"),
                                                           ("", "d")]
    assert found[1].dead_letter_topic == "D_DEAD"
    assert found[0].source.startswith("ListTopicSubscriptions")
