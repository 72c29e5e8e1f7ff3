"""Dapr mode end to end: a Dapr resources directory with a ``pubsub.aws.snssqs`` component on
moto server, events published as Dapr's publisher publishes them (SNS Publish of Dapr's
CloudEvent), the real ``priority-pubsub run`` subprocess, a real HTTP app.

Expected wire values are derived from Dapr's source (cited per test): dapr
``pkg/runtime/subscription/subscription.go`` (the subscriber handler),
``pkg/runtime/subscription/postman/http/http.go`` (``Deliver``),
``pkg/channel/http/http_channel.go`` (``constructRequest``), components-contrib
``pubsub/envelope.go`` (``FromRawPayload``) and ``pubsub/aws/snssqs/snssqs.go``.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.helpers import journal_records
from tests.support.app import Received, RecordingApp, Reply
from tests.support.dapr_resources import (
    Sns,
    dapr_config,
    dapr_event,
    snssqs_component,
    subscription_v2,
    write_resources,
)
from tests.support.moto_server import MotoServer
from tests.support.sidecar import cli, start_sidecar, write_config

pytestmark = pytest.mark.sqs
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "dapr_golden"


def deliveries(app: RecordingApp, count: int, timeout_s: float = 20) -> list[Received]:
    """The event deliveries (daprd-style start-up also asks ``GET /dapr/subscribe``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [r for r in list(app.received) if r.path != "/dapr/subscribe"]
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise AssertionError(f"app saw {len(found)} deliveries, expected {count}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_v2_rules_route_by_type_and_unmatched_goes_to_the_dead_letter_topic(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    topic, dead = unique("orders"), unique("orders-dead")
    rules = [{"match": 'event.type == "widget"', "path": "/widgets"},
             {"match": 'event.type == "gadget"', "path": "/gadgets"},
             {"match": 'event.type == "gizmo" && event.data.size > 2', "path": "gizmos"}]
    resources = write_resources(
        tmp_path / "resources", snssqs_component("shop", moto_server),
        subscription_v2("orders", "shop", topic, rules=rules, dead_letter=dead))
    tap = sns.tap(dead)
    sidecar = start_sidecar(tmp_path, dapr_config(tmp_path, resources, unique("app"), app.url))
    try:
        published = {}
        for kind, size in (("widget", 1), ("gadget", 1), ("gizmo", 3), ("gizmo", 1)):
            body = _typed_event(kind, {"size": size}, topic)
            published[(kind, size)] = body
            sns.publish(topic, body)
        received = deliveries(app, 3)
        dead_letters = sns.messages(tap, expect=1)
    finally:
        assert sidecar.stop() == 0
    assert sorted(r.path for r in received) == ["/gadgets", "/gizmos", "/widgets"]
    by_path = {r.path: r.body for r in received}
    assert by_path["/widgets"] == published[("widget", 1)]
    assert by_path["/gizmos"] == published[("gizmo", 3)]
    # no rule matched the small gizmo: daprd publishes the data unchanged to deadLetterTopic
    [dead_letter] = dead_letters
    assert dead_letter["Message"].encode() == published[("gizmo", 1)]
    outcomes = sorted(r["outcome"] for r in journal_records(tmp_path / "journal"))
    assert outcomes == ["ack", "ack", "ack", "drop"]


def _typed_event(kind: str, data: dict[str, int], topic: str) -> bytes:
    event = json.loads(dapr_event(data, topic=topic, pubsub="shop"))
    event["type"] = kind
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()


def test_two_topics_sharing_daprs_queue_reach_their_own_routes(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    app_id, orders, payments = unique("app"), unique("orders"), unique("payments")
    resources = write_resources(
        tmp_path / "resources", snssqs_component("shop", moto_server),
        subscription_v2("orders", "shop", orders, default="/orders"),
        subscription_v2("payments", "shop", payments, default="/payments"))
    config = dapr_config(tmp_path, resources, app_id, app.url)
    config["dapr"]["queue_layout"] = "shared"  # daprd's: one queue per app id, every topic
    sidecar = start_sidecar(tmp_path, config)
    try:
        sns.publish(payments, dapr_event({"payment": 1}, topic=payments, pubsub="shop"))
        sns.publish(orders, dapr_event({"order": 1}, topic=orders, pubsub="shop"))
        received = deliveries(app, 2)
    finally:
        assert sidecar.stop() == 0
    routes = {r.event["topic"]: r.path for r in received}
    assert routes == {payments: "/payments", orders: "/orders"}
    assert sns.visible(app_id) == 0  # one queue, named as daprd names it, all acked


def test_dapr_priorities_serve_the_high_topic_first(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    app_id, high, normal = unique("app"), unique("orders-high"), unique("orders")
    resources = write_resources(
        tmp_path / "resources", snssqs_component("shop", moto_server),
        subscription_v2("orders", "shop", normal, default="/orders"),
        subscription_v2("orders-high", "shop", high, default="/orders"))
    config = dapr_config(tmp_path, resources, app_id, app.url, concurrency=2)
    config["dapr"]["priorities"] = [high, normal]
    # first start creates the per-topic queues (entity management), then a backlog builds up
    start_sidecar(tmp_path, config, name="provision").stop()
    for number in range(50):
        sns.publish(normal, dapr_event({"n": number}, topic=normal, pubsub="shop"))
        sns.publish(high, dapr_event({"n": number}, topic=high, pubsub="shop"))
    assert sns.visible(f"{app_id}-{high}") == 50
    assert sns.visible(f"{app_id}-{normal}") == 50
    sidecar = start_sidecar(tmp_path, config)
    try:
        received = deliveries(app, 100, timeout_s=60)
    finally:
        assert sidecar.stop() == 0
    topics = [r.event["topic"] for r in received]
    assert topics[:50] == [high] * 50, topics
    assert sorted(topics[50:]) == [normal] * 50


def test_check_names_a_route_the_app_does_not_serve(
    tmp_path: Path, sns: Sns, moto_server: MotoServer
) -> None:
    served = {"/orders"}

    def behaviour(request: Received) -> Reply:
        return Reply(200 if request.path in served else 404)

    resources = write_resources(
        tmp_path / "resources", snssqs_component("shop", moto_server),
        subscription_v2("orders", "shop", "orders", default="/orders"),
        subscription_v2("payments", "shop", "payments", default="/paymnets"))
    with RecordingApp(behaviour) as app:
        config = write_config(tmp_path, dapr_config(tmp_path, resources, unique("app"), app.url))
        result = cli("check", config=config)
    assert result.returncode == 1, result.stderr
    assert "route /paymnets (topic payments" in result.stderr
    assert "/orders (" not in result.stderr


def test_daprd_flags_replace_the_config_and_an_unsafe_daprd_flag_is_refused(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    topic = unique("orders")
    resources = write_resources(tmp_path / "resources", snssqs_component("shop", moto_server),
                                subscription_v2("orders", "shop", topic, default="/orders"))
    wrong = cli("run", "--resources-path", str(resources), "--app-id", "a",
                "--unix-domain-socket", str(tmp_path))
    assert wrong.returncode == 2
    assert "daprd flag --unix-domain-socket cannot be honoured" in wrong.stderr
    base = dapr_config(tmp_path, resources, "ignored", "http://127.0.0.1:1")
    del base["dapr"], base["app"]
    sidecar = start_sidecar(tmp_path, base, args=(
        "--resources-path", str(resources), "--app-id", unique("app"),
        "--app-port", str(app.port), "--app-max-concurrency", "3"))
    try:
        body = dapr_event({"orderId": 1}, topic=topic, pubsub="shop")
        sns.publish(topic, body)
        [request] = deliveries(app, 1)
    finally:
        assert sidecar.stop() == 0
    assert (request.path, request.body) == ("/orders", body)


# --- golden files: what daprd sends, derived from its source -------------------------------

def _deliver_one(tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer,
                 body: bytes, **metadata: str) -> Received:
    topic = unique("orders")
    resources = write_resources(
        tmp_path / "resources", snssqs_component("orderpubsub", moto_server),
        subscription_v2("orders", "orderpubsub", topic, default="/orders",
                        metadata=metadata or None))
    sidecar = start_sidecar(tmp_path, dapr_config(tmp_path, resources, unique("app"), app.url))
    try:
        sns.publish(topic, body.replace(b"TOPIC", topic.encode()))
        [request] = deliveries(app, 1)
    finally:
        assert sidecar.stop() == 0
    return request


def _golden(name: str) -> dict[str, object]:
    value = json.loads((GOLDEN / name).read_text())
    assert isinstance(value, dict)
    return value


def test_golden_dapr_published_cloudevent(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    golden = _golden("cloudevent.json")
    published = json.dumps(golden["published"], sort_keys=True, separators=(",", ":")).encode()
    request = _deliver_one(tmp_path, app, sns, moto_server, published)
    topic = request.event["topic"]
    # subscription.go: Data = msg.Data (the SNS Message) unchanged; http.go:
    # WithRawDataBytes(msg.Data).WithContentType(application/cloudevents+json)
    assert request.body == published.replace(b"TOPIC", topic.encode())
    _assert_headers(request, golden["headers"])


def test_golden_raw_payload_subscription(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    golden = _golden("raw_payload.json")
    raw = str(golden["published"]).encode()
    request = _deliver_one(tmp_path, app, sns, moto_server, raw, rawPayload="true")
    topic = request.event["topic"]
    # envelope.go FromRawPayload: a random uuid id, data_base64 of the bytes; subscription.go
    # json.Marshal(cloudEvent): Go's map encoding, keys sorted, compact
    expected = {**golden["event"], "id": request.event["id"], "topic": topic,
                "data_base64": base64.b64encode(raw).decode()}
    assert request.body == json.dumps(expected, sort_keys=True, separators=(",", ":")).encode()
    assert uuid.UUID(request.event["id"]).version == 4
    _assert_headers(request, golden["headers"])


def test_golden_plain_json_body(
    tmp_path: Path, app: RecordingApp, sns: Sns, moto_server: MotoServer
) -> None:
    golden = _golden("plain_json.json")
    published = str(golden["published"]).encode()
    request = _deliver_one(tmp_path, app, sns, moto_server, published)
    # subscription.go default case: json.Unmarshal only to route; the bytes go unchanged,
    # never wrapped in a new CloudEvent
    assert request.body == published
    _assert_headers(request, golden["headers"])


def _assert_headers(request: Received, expected: object) -> None:
    assert isinstance(expected, dict)
    headers = {name.lower(): value for name, value in request.headers.items()}
    for name, value in expected["equal"].items():
        assert headers.get(name) == value, (name, headers)
    for name in expected["absent_prefixes"]:
        assert not [h for h in headers if h.startswith(name)], (name, headers)
    if expected.get("traceparent_from_event"):
        # http_channel.go sets traceparent from the span of the event's trace (same trace id)
        assert headers["traceparent"].split("-")[1] == request.event["traceparent"].split("-")[1]
