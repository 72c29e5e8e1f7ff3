"""Bulk subscriptions as daprd delivers them over HTTP (dapr ``pkg/runtime/pubsub/
bulksubscribe.go`` envelope; ``postman/http/http.go`` ``DeliverBulk``: per-entry
``statuses``, an entry missing from the answer retried), on Redis behind the real sidecar
started with a daprd command line.

- An app answering SUCCESS, RETRY, DROP and nothing in one batch: each entry settled by its
  own status (acked, retried, dropped, retried), the retried ones in a later batch.
- The same over gRPC (``OnBulkTopicEvent``, the subscription from the app's
  ``ListTopicSubscriptions`` with its ``bulk_subscribe`` config); each entry's ``baggage``
  in its own metadata, none on the call (one entry's is not the batch's).
- A high message published while a low batch holds every worker is in the next batch.
- ``rawPayload`` entries carry the data as published (HTTP base64, gRPC ``bytes``).
- SIGTERM while pushed messages and a sent batch are at the app past the grace period and
  an entry waits for its batch to fill: what the app had counts one attempt
  but never past the limit, the waiting entry comes back uncounted, nothing is
  dead-lettered.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from dapr.proto.runtime.v1 import appcallback_pb2

from priority_pubsub.delivery.settlement import LAST_ATTEMPT_KEPT
from priority_pubsub.delivery.worker import SHUTDOWN_REASON, STOPPING_REASON
from tests.e2e.helpers import assert_attempts_follow_the_stop_rule, journal_records
from tests.support.app import Received, RecordingApp, Reply
from tests.support.dapr_resources import dapr_event
from tests.support.daprd import Daprd, redis_resources
from tests.support.grpc_app import DROP, RETRY, SUCCESS, GrpcApp
from tests.support.redis_server import OwnRedis
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis


def _bulk_subscription(topic: str, max_messages: int, max_await_ms: int,
                       priority: int = 0) -> dict[str, Any]:
    return {"apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
            "metadata": {"name": topic},
            "spec": {"pubsubname": "orderpubsub", "topic": topic,
                     "routes": {"default": f"/{topic}"},
                     "metadata": {"priority": str(priority)},
                     "bulkSubscribe": {"enabled": True, "maxMessagesCount": max_messages,
                                       "maxAwaitDurationMs": max_await_ms}}}


def _own_config(tmp_path: Path) -> dict[str, str]:
    """A priority-pubsub config beside the daprd line: journal and quick retries."""
    path = tmp_path / "priority-pubsub.yaml"
    path.write_text(yaml.safe_dump({
        "journal": {"path": str(tmp_path / "journal")},
        "retry": {"initial_delay_s": 0.2, "max_delay_s": 1, "max_attempts": 5},
        "shutdown": {"grace_s": 2}}))
    return {"PRIORITY_PUBSUB_CONFIG": str(path)}


def _publish(own_redis: OwnRedis, topic: str, orders: list[int], *,
             baggage: bool = False) -> None:
    """``baggage``: each event carries ``order=<n>`` as its ``baggage`` (dapr #10385)."""
    client = redis.Redis(port=own_redis.port)
    for order in orders:  # as daprd's pubsub.redis publishes: XADD topic * data <event>
        extra = {"baggage": f"order={order}"} if baggage else {}
        client.xadd(topic, {"data": dapr_event({"orderId": order}, topic=topic,
                                               pubsub="orderpubsub", **extra)})
    client.close()


def _batches(app: RecordingApp, path: str) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in list(app.received) if r.path == path]


def _order_ids(batch: dict[str, Any]) -> list[int]:
    return [entry["event"]["data"]["orderId"] for entry in batch["entries"]]


def test_each_entry_of_a_batch_is_settled_by_its_own_status(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def answer(received: Received) -> Reply:
        if received.path != "/orders":
            return Reply()
        statuses = []
        for entry in json.loads(received.body)["entries"]:
            order = entry["event"]["data"]["orderId"]
            with lock:
                seen[order] = seen.get(order, 0) + 1
                first = seen[order] == 1
            status = {0: "SUCCESS", 1: "RETRY", 2: "DROP", 3: None}[order] if first else "SUCCESS"
            if status is not None:  # order 3 left out of the first answer: retried
                statuses.append({"entryId": entry["entryId"], "status": status})
        return Reply(body={"statuses": statuses})

    resources = redis_resources(tmp_path / "resources", own_redis.port,
                                [_bulk_subscription("orders", 4, 2000)])
    _publish(own_redis, "orders", [0, 1, 2, 3])
    with RecordingApp(answer) as app:
        daprd = Daprd(tmp_path, "bulk-orders", resources, app.port,
                      "--app-max-concurrency", "4", env=_own_config(tmp_path))
        try:
            daprd.wait_api()
            wait_until(lambda: seen.get(1) == 2 and seen.get(3) == 2, 30)
            time.sleep(1.5)  # a redelivery of 0 or 2 would show up here
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
    first, *later = _batches(app, "/orders")
    assert sorted(_order_ids(first)) == [0, 1, 2, 3]
    assert {k: v for k, v in first.items() if k not in ("entries", "id")} == {
        "metadata": {"pubsubName": "orderpubsub"}, "pubsubname": "orderpubsub",
        "topic": "orders", "type": "com.dapr.event.sent.bulk"}
    entry = first["entries"][0]
    assert entry["contentType"] == "application/cloudevents+json"
    assert entry["event"]["type"] == "com.dapr.event.sent"
    assert sorted(i for batch in later for i in _order_ids(batch)) == [1, 3]
    by_message: dict[str, list[str]] = {}
    for record in journal_records(tmp_path / "journal"):
        by_message.setdefault(record["message_id"], []).append(record["outcome"])
    # four messages, each settled by its entry's status: SUCCESS acked, DROP dropped, RETRY
    # and the missing entry retried (then acked in a later batch)
    assert sorted(by_message.values()) == [["ack"], ["drop"], ["retry", "ack"],
                                           ["retry", "ack"]]


def test_a_high_message_published_while_low_batches_run_is_in_the_next_batch(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    def slow_low(received: Received) -> Reply:
        if received.path not in ("/low", "/high"):
            return Reply()
        entries = json.loads(received.body)["entries"]
        return Reply(delay_s=1.0 if received.path == "/low" else 0.0, body={"statuses": [
            {"entryId": e["entryId"], "status": "SUCCESS"} for e in entries]})

    resources = redis_resources(tmp_path / "resources", own_redis.port, [
        _bulk_subscription("high", 2, 300, priority=1),
        _bulk_subscription("low", 2, 300, priority=2)])
    _publish(own_redis, "low", list(range(6)))
    with RecordingApp(slow_low) as app:
        daprd = Daprd(tmp_path, "bulk-priority", resources, app.port,
                      "--app-max-concurrency", "2", env=_own_config(tmp_path))
        try:
            daprd.wait_api()
            wait_until(lambda: len(_batches(app, "/low")) >= 1, 30)
            published_at = len([r for r in app.received if r.path in ("/low", "/high")])
            _publish(own_redis, "high", [100])
            wait_until(lambda: sum(len(b["entries"]) for b in _batches(app, "/low")) >= 6, 30)
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
    sent = [r for r in app.received if r.path in ("/low", "/high")]
    assert len(json.loads(sent[0].body)["entries"]) == 2  # a batch holds both workers
    assert sent[published_at].path == "/high", [r.path for r in sent]
    assert _order_ids(json.loads(sent[published_at].body)) == [100]


def test_over_grpc_each_entry_is_settled_by_its_own_status(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def answer(entry: appcallback_pb2.TopicEventBulkRequestEntry) -> int | None:
        order = json.loads(entry.cloud_event.data)["orderId"]
        with lock:
            seen[order] = seen.get(order, 0) + 1
            first = seen[order] == 1
        return {0: SUCCESS, 1: RETRY, 2: DROP, 3: None}[order] if first else SUCCESS

    subscription = appcallback_pb2.TopicSubscription(
        pubsub_name="orderpubsub", topic="orders",
        bulk_subscribe=appcallback_pb2.BulkSubscribeConfig(
            enabled=True, max_messages_count=4, max_await_duration_ms=2000))
    resources = redis_resources(tmp_path / "resources", own_redis.port, [])
    _publish(own_redis, "orders", [0, 1, 2, 3], baggage=True)
    with GrpcApp(bulk_answer=answer, subscriptions=[subscription]) as app:
        daprd = Daprd(tmp_path, "bulk-grpc", resources, app.port, "--app-protocol", "grpc",
                      "--app-max-concurrency", "4", env=_own_config(tmp_path))
        try:
            daprd.wait_api()
            wait_until(lambda: seen.get(1) == 2 and seen.get(3) == 2, 30)
            time.sleep(1.5)
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
    first = app.bulk_calls[0]
    assert sorted(json.loads(e.cloud_event.data)["orderId"] for e in first.entries) == [
        0, 1, 2, 3]
    assert (first.pubsub_name, first.topic, first.type) == (
        "orderpubsub", "orders", "com.dapr.event.sent.bulk")
    # daprd's FetchEntry: the component's content type, and pubsub.redis gives none
    assert {e.content_type for e in first.entries} == {""}
    # each entry's baggage is its own, in its metadata; none is the whole call's
    for entry in first.entries:
        order = json.loads(entry.cloud_event.data)["orderId"]
        assert entry.metadata["baggage"] == f"order={order}"
    assert "baggage" not in app.bulk_metadata[0]
    assert app.calls == []  # nothing went one by one
    assert seen == {0: 1, 1: 2, 2: 1, 3: 2}
    by_message: dict[str, list[str]] = {}
    for record in journal_records(tmp_path / "journal"):
        by_message.setdefault(record["message_id"], []).append(record["outcome"])
    assert sorted(by_message.values()) == [["ack"], ["drop"], ["retry", "ack"],
                                           ["retry", "ack"]]


def _publish_raw(own_redis: OwnRedis, topic: str, bodies: list[bytes]) -> None:
    client = redis.Redis(port=own_redis.port)
    for body in bodies:  # a publisher with rawPayload: the bytes, no CloudEvent
        client.xadd(topic, {"data": body})
    client.close()


def test_raw_payload_entries_carry_the_data_as_daprd_sends_them(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    """``rawPayload``: daprd's HTTP entry is the data in base64 with
    ``application/octet-stream`` (``bulksubscription.go``), its gRPC entry the data as
    ``bytes`` (``FetchEntry``), not the CloudEvent made of it."""
    def answer(received: Received) -> Reply:
        if received.path != "/raw":
            return Reply()
        entries = json.loads(received.body)["entries"]
        return Reply(body={"statuses": [{"entryId": e["entryId"], "status": "SUCCESS"}
                                        for e in entries]})

    subscription = _bulk_subscription("raw", 2, 2000)
    subscription["spec"]["metadata"]["rawPayload"] = "true"
    resources = redis_resources(tmp_path / "resources", own_redis.port, [subscription])
    _publish_raw(own_redis, "raw", [b"plain-1", b"\x00\xffbinary"])
    with RecordingApp(answer) as app:
        daprd = Daprd(tmp_path, "bulk-raw", resources, app.port,
                      "--app-max-concurrency", "2", env=_own_config(tmp_path))
        try:
            daprd.wait_api()
            wait_until(lambda: sum(len(b["entries"]) for b in _batches(app, "/raw")) >= 2, 30)
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
    entries = [e for batch in _batches(app, "/raw") for e in batch["entries"]]
    assert sorted(base64.b64decode(e["event"]) for e in entries) == [b"\x00\xffbinary",
                                                                      b"plain-1"]
    assert {e["contentType"] for e in entries} == {"application/octet-stream"}
    assert sorted(r["outcome"] for r in journal_records(tmp_path / "journal")) == ["ack", "ack"]

    grpc_bodies: list[bytes] = []

    def grpc_answer(entry: appcallback_pb2.TopicEventBulkRequestEntry) -> int | None:
        assert entry.WhichOneof("event") == "bytes", entry
        grpc_bodies.append(entry.bytes)
        return SUCCESS

    grpc_subscription = appcallback_pb2.TopicSubscription(
        pubsub_name="orderpubsub", topic="rawgrpc", metadata={"rawPayload": "true"},
        bulk_subscribe=appcallback_pb2.BulkSubscribeConfig(
            enabled=True, max_messages_count=2, max_await_duration_ms=2000))
    resources = redis_resources(tmp_path / "grpc-resources", own_redis.port, [])
    _publish_raw(own_redis, "rawgrpc", [b"plain-2"])
    with GrpcApp(bulk_answer=grpc_answer, subscriptions=[grpc_subscription]) as grpc_app:
        daprd = Daprd(tmp_path, "bulk-raw-grpc", resources, grpc_app.port, "--app-protocol",
                      "grpc", "--app-max-concurrency", "2", env=_own_config(tmp_path))
        try:
            daprd.wait_api()
            wait_until(lambda: grpc_bodies == [b"plain-2"], 30)
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
    [call] = grpc_app.bulk_calls
    assert [e.content_type for e in call.entries] == [""]  # the component gave none


def _stopping_resources(directory: Path, own_redis: OwnRedis) -> Path:
    """``pushed`` one by one (priority 1), ``batched`` in batches of two that wait 10 s to
    fill (priority 2); both name the dead-letter topic ``stopped-dead``. A retry parked while
    a take waits is taken when that wait next looks: every 200 ms, not daprd's 5 s."""
    pushed = {"apiVersion": "dapr.io/v2alpha1", "kind": "Subscription",
              "metadata": {"name": "pushed"},
              "spec": {"pubsubname": "orderpubsub", "topic": "pushed",
                       "routes": {"default": "/pushed"}, "deadLetterTopic": "stopped-dead",
                       "metadata": {"priority": "1"}}}
    batched = _bulk_subscription("batched", 2, 10_000, priority=2)
    batched["spec"]["deadLetterTopic"] = "stopped-dead"
    resources = redis_resources(directory, own_redis.port, [pushed, batched])
    path = resources / "resources.yaml"
    documents = list(yaml.safe_load_all(path.read_text()))
    documents[0]["spec"]["metadata"].append({"name": "redeliverInterval", "value": "200ms"})
    path.write_text(yaml.safe_dump_all(documents))
    return resources


def _history(record: dict[str, Any]) -> tuple[str, int, str]:
    """A journal record as (outcome, attempt, what the stop did to it, if anything)."""
    reason = record["reason"] or ""
    if reason == STOPPING_REASON:
        return record["outcome"], record["attempt"], "unseen"
    if reason.startswith(SHUTDOWN_REASON):
        kept = LAST_ATTEMPT_KEPT in reason
        return record["outcome"], record["attempt"], "cut at the limit" if kept else "cut"
    return record["outcome"], record["attempt"], ""


def test_sigterm_never_punishes_a_pushed_or_batched_message(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    """In Dapr mode, push and bulk (``retry.max_attempts`` 2, grace 1 s):
    SIGTERM while the app holds a pushed message at its last attempt, another at its first
    and a sent batch of two, while a third batched message waits for its batch to fill and
    new messages arrive. The cut-short deliveries count one attempt (the one at the limit
    none) and come back at once; the waiting entry, which the app never saw, comes back
    uncounted; after a restart every message is acked once, nothing is dead-lettered."""
    # 10 s to fill a batch: the stop comes long before, and a message published while the
    # sidecar is down fills the batch again after the restart
    path = tmp_path / "stopping.yaml"
    path.write_text(yaml.safe_dump({
        "journal": {"path": str(tmp_path / "journal")},
        "retry": {"initial_delay_s": 0.2, "max_delay_s": 0.5, "max_attempts": 2},
        "shutdown": {"grace_s": 1}}))
    env = {"PRIORITY_PUBSUB_CONFIG": str(path)}
    client = redis.Redis(port=own_redis.port)

    def publish(topic: str, order: int) -> tuple[str, str]:
        """The message as the journal names it: its queue (the topic) and entry id (unique
        in its stream only)."""
        entry = client.xadd(topic, {"data": dapr_event({"orderId": order}, topic=topic,
                                                       pubsub="orderpubsub")})
        return topic, entry.decode()

    restarted = threading.Event()
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def answer(received: Received) -> Reply:
        if received.path == "/batched":
            entries = json.loads(received.body)["entries"]
            if not restarted.is_set():
                return Reply(until_closed=True)
            return Reply(body={"statuses": [{"entryId": e["entryId"], "status": "SUCCESS"}
                                            for e in entries]})
        if received.path != "/pushed":
            return Reply()
        order = received.event["data"]["orderId"]
        with lock:
            seen[order] = seen.get(order, 0) + 1
            first = seen[order] == 1
        if restarted.is_set() or order >= 10:
            return Reply()
        if order == 1 and first:
            return Reply(503)  # back at once as attempt 2, the last
        return Reply(until_closed=True)  # held past the grace period

    resources = _stopping_resources(tmp_path / "resources", own_redis)
    edge, held = publish("pushed", 1), publish("pushed", 2)
    batched = [publish("batched", order) for order in (3, 4, 5)]
    with RecordingApp(answer) as app:
        daprd = Daprd(tmp_path, "stopping", resources, app.port,
                      "--app-max-concurrency", "6", env=env)
        try:
            daprd.wait_api()
            wait_until(lambda: seen.get(1) == 2 and seen.get(2) == 1
                       and len(_batches(app, "/batched")) == 1, 30)
            arriving = [publish("pushed", 10)]
            wait_until(lambda: 10 in seen, 30)
            daprd.process.terminate()
            arriving += [publish("pushed", order) for order in (11, 12)]
            assert daprd.process.wait(30) == 0
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
        [sent] = _batches(app, "/batched")
        assert sorted(_order_ids(sent)) == [3, 4]  # 5 waited for its batch to fill
        restarted.set()
        arriving.append(publish("batched", 6))  # fills 5's batch again after the restart
        (tmp_path / "restarted").mkdir()
        daprd = Daprd(tmp_path / "restarted", "stopping", resources, app.port,
                      "--app-max-concurrency", "6", env=env)
        published = {edge, held, *batched, *arriving}

        def acked() -> list[tuple[str, str]]:
            return [(r["queue"], r["message_id"]) for r in journal_records(tmp_path / "journal")
                    if r["outcome"] == "ack"]

        try:  # back at once: the lease (processingTimeout) is 60 s
            wait_until(lambda: set(acked()) == published or any(
                r["outcome"] in ("dead", "drop") for r in journal_records(tmp_path / "journal")),
                30)
        finally:
            assert daprd.stop() == 0, daprd.logs()[-3000:]
    assert client.xlen("stopped-dead") == 0
    client.close()
    assert sorted(acked()) == sorted(published)  # nothing lost, each acked once
    records: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in journal_records(tmp_path / "journal", releases=True):
        records.setdefault((record["queue"], record["message_id"]), []).append(record)
    histories = {key: [_history(r) for r in history] for key, history in records.items()}
    assert histories.pop(edge) == [("retry", 1, ""), ("retry", 2, "cut at the limit"),
                                   ("ack", 2, "")]
    assert histories.pop(held) == [("retry", 1, "cut"), ("ack", 2, "")]
    for entry in batched[:2]:
        assert histories.pop(entry) == [("retry", 1, "cut"), ("ack", 2, "")]
    assert histories.pop(batched[2]) == [("release", 1, "unseen"), ("ack", 1, "")]
    for entry in arriving:  # taken as it stopped at worst: handed back, or cut short
        assert histories.pop(entry)[-1][0] == "ack"
        assert_attempts_follow_the_stop_rule(records[entry], releases_counted=False)
    assert histories == {}
