"""Dapr's metadata templates and namespace-scoped components end to end, with the components
Dapr's docs give for them: "How to: Set up pub/sub namespace consumer groups"
(``consumerID: "{namespace}"``) and "Horizontally scale subscribers with StatefulSets"
(``consumerID: "{podName}"``), on real brokers behind the real sidecar.

Expected broker names are daprd's (1.16-1.18): dapr ``pkg/runtime/meta/meta.go``
(``{namespace}`` = ``NAMESPACE.appID``; ``ContainsNamespace``),
``pkg/runtime/pubsub/publisher/publisher.go`` and ``pkg/runtime/subscription/subscription.go``
(a namespace-scoped component's topic on the broker is ``NAMESPACE + topic``, no separator,
to publish, subscribe and dead-letter; the app keeps its own topic name), components-contrib
``pubsub/redis`` (stream = topic, group = consumerID) and ``pubsub/aws/snssqs`` (queue =
consumerID, SNS topic = topic, both sanitised).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import redis

from priority_pubsub.dapr.naming import aws_sanitized
from tests.support.app import Received, RecordingApp, Reply
from tests.support.dapr_resources import (
    dapr_config,
    dapr_event,
    snssqs_component,
    subscription_v2,
    write_resources,
)
from tests.support.moto_server import MotoServer
from tests.support.quickstarts import publish_api
from tests.support.redis_server import OwnRedis
from tests.support.sidecar import SidecarProcess, cli, write_config
from tests.support.waiting import wait_until

APP_ID = "shop"


def _redis_resources(directory: Path, redis_port: int, consumer_id: str) -> Path:
    component = {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
                 "metadata": {"name": "orderpubsub"},
                 "spec": {"type": "pubsub.redis", "version": "v1", "metadata": [
                     {"name": "redisHost", "value": f"127.0.0.1:{redis_port}"},
                     {"name": "consumerID", "value": consumer_id}]}}
    return write_resources(directory, component, subscription_v2(
        "orders", "orderpubsub", "orders", default="/orders", dead_letter="poisoned"))


def _drop_poison(received: Received) -> Reply:
    """daprd sends a dropped event to the subscription's deadLetterTopic."""
    if received.path == "/orders" and received.event["data"].get("poison"):
        return Reply(body={"status": "DROP"})
    return Reply()


def _sidecar(tmp_path: Path, name: str, resources: Path, app: RecordingApp,
             environment: dict[str, str], **overrides: Any) -> SidecarProcess:
    config = dapr_config(tmp_path, resources, APP_ID, app.url, driver={},  # Redis: none
                         journal={"path": str(tmp_path / f"journal-{name}")}, **overrides)
    config["dapr"]["programmatic_subscriptions"] = False
    return SidecarProcess(tmp_path, config, name=name, env=environment)


def _orders(app: RecordingApp) -> list[Received]:
    return [r for r in list(app.received) if r.path == "/orders"]


def _started(*sidecars: SidecarProcess) -> None:
    for sidecar in sidecars:
        sidecar.wait_ready(timeout_s=30)


@pytest.mark.redis
def test_namespace_consumer_groups_keep_each_namespaces_messages_to_itself(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    """Two namespaces, one Redis, apps with one app id: each app gets exactly what its own
    namespace published, the topic as it named it; the broker holds daprd's names."""
    resources = _redis_resources(tmp_path / "resources", own_redis.port, "{namespace}")
    apis = {team: publish_api(grpc_port=None) for team in ("team-a", "team-b")}
    with RecordingApp(_drop_poison) as app_a, RecordingApp(_drop_poison) as app_b:
        apps = {"team-a": app_a, "team-b": app_b}
        sidecars = [_sidecar(tmp_path, team, resources, apps[team],
                             {"NAMESPACE": team, "POD_NAME": f"{APP_ID}-{team}"},
                             publish_api=apis[team]) for team in apps]
        try:
            _started(*sidecars)
            for team, api in apis.items():
                base = f"http://127.0.0.1:{api['http_port']}/v1.0"
                for n in range(3):
                    answer = httpx.post(f"{base}/publish/orderpubsub/orders",
                                        json={"team": team, "n": n}, timeout=5)
                    assert answer.status_code == 204, answer.text
            poison = httpx.post(f"http://127.0.0.1:{apis['team-a']['http_port']}/v1.0/publish/"
                                "orderpubsub/orders", json={"poison": True}, timeout=5)
            assert poison.status_code == 204, poison.text
            for app in apps.values():
                wait_until(lambda a=app: len(_orders(a)) >= 3 + (a is app_a), 30)
            time.sleep(1)  # a message of the other namespace would have come by now
            metadata = httpx.get(f"http://127.0.0.1:{apis['team-a']['http_port']}/v1.0/"
                                 "metadata", timeout=5).json()
        finally:
            codes = [sidecar.stop() for sidecar in sidecars]
    assert codes == [0, 0], "\n".join(s.logs()[-3000:] for s in sidecars)
    for team, app in apps.items():
        events = [r.event for r in _orders(app) if not r.event["data"].get("poison")]
        assert sorted(e["data"]["n"] for e in events) == [0, 1, 2]
        assert {e["data"]["team"] for e in events} == {team}
        assert {r.event["topic"] for r in _orders(app)} == {"orders"}  # the app's own name
    assert [s["topic"] for s in metadata["subscriptions"]] == ["orders"]
    raw = redis.Redis.from_url(own_redis.url)
    try:
        # daprd's names: stream NAMESPACE + topic, group NAMESPACE.appID (consumerID)
        assert sorted(key.decode() for key in raw.keys("*")) == [
            "team-aorders", "team-apoisoned", "team-borders"]
        for team, expected in (("team-a", 4), ("team-b", 3)):
            [group] = raw.xinfo_groups(f"{team}orders")
            assert (group["name"].decode(), group["pending"]) == (f"{team}.{APP_ID}", 0)
            assert raw.xlen(f"{team}orders") == expected
        [(_, fields)] = raw.xrange("team-apoisoned")  # the dead letter, prefixed too
        assert b'"poison":true' in fields[b"data"].replace(b" ", b"")
    finally:
        raw.close()


@pytest.mark.redis
def test_pod_name_consumer_id_gives_each_replica_its_own_consumer(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    """A StatefulSet subscriber as Dapr's docs describe it: one app id, ``consumerID:
    "{podName}"``, so each replica is its own consumer group and gets every message. No
    ``{namespace}``: the topic is not prefixed, whatever ``NAMESPACE`` says."""
    resources = _redis_resources(tmp_path / "resources", own_redis.port, "{podName}")
    with RecordingApp() as app_0, RecordingApp() as app_1:
        apps = {"orders-0": app_0, "orders-1": app_1}
        sidecars = [_sidecar(tmp_path, pod, resources, apps[pod],
                             {"NAMESPACE": "team-a", "POD_NAME": pod}) for pod in apps]
        raw = redis.Redis.from_url(own_redis.url)
        try:
            _started(*sidecars)
            for n in range(3):  # as daprd's pubsub.redis Publish writes
                raw.xadd("orders", {"data": dapr_event({"n": n}, topic="orders",
                                                       pubsub="orderpubsub")})
            for app in apps.values():
                wait_until(lambda a=app: len(_orders(a)) >= 3, 30)
            time.sleep(0.5)
            groups = sorted(g["name"].decode() for g in raw.xinfo_groups("orders"))
        finally:
            codes = [sidecar.stop() for sidecar in sidecars]
            raw.close()
    assert codes == [0, 0], "\n".join(s.logs()[-3000:] for s in sidecars)
    assert groups == ["orders-0", "orders-1"]
    for app in apps.values():
        assert sorted(r.event["data"]["n"] for r in _orders(app)) == [0, 1, 2]


# --- snssqs on moto ---------------------------------------------------------------------

@pytest.mark.sqs
@pytest.mark.parametrize("layout", ["shared", "per-topic"])
def test_snssqs_namespace_entities_are_daprds_names_and_deliver(
    tmp_path: Path, moto_server: MotoServer, layout: str
) -> None:
    """``priority-pubsub provision`` makes daprd's entities of a namespace-scoped snssqs
    component (``shared``: daprd's own queue, the sanitised ``{consumerID}``; ``per-topic``:
    ``{consumerID}-{NAMESPACE + topic}``, sanitised), the SNS topic ``NAMESPACE + topic``;
    then a publish through the API reaches the app with the topic unprefixed."""
    app_id, topic = f"shop-{uuid.uuid4().hex[:8]}", f"orders-{uuid.uuid4().hex[:8]}"
    consumer = f"team-a.{app_id}"  # {namespace}
    queue = aws_sanitized(consumer if layout == "shared" else f"{consumer}-team-a{topic}")
    assert queue == (f"team-a{app_id}" if layout == "shared"
                     else f"team-a{app_id}-team-a{topic}")
    resources = write_resources(
        tmp_path / "resources",
        snssqs_component("orderpubsub", moto_server, consumerID="{namespace}"),
        subscription_v2("orders", "orderpubsub", topic, default="/orders"))
    api = publish_api(grpc_port=None)
    with RecordingApp() as app:
        config = dapr_config(tmp_path, resources, app_id, app.url, publish_api=api)
        config["dapr"].update(queue_layout=layout, programmatic_subscriptions=False)
        made = cli("provision", config=write_config(tmp_path, config),
                   env={"NAMESPACE": "team-a"})
        assert made.returncode == 0, made.stdout + made.stderr
        _assert_subscribed(moto_server, f"team-a{topic}", queue)
        sidecar = SidecarProcess(tmp_path, config, env={"NAMESPACE": "team-a"})
        try:
            sidecar.wait_ready(timeout_s=30)
            answer = httpx.post(f"http://127.0.0.1:{api['http_port']}/v1.0/publish/"
                                f"orderpubsub/{topic}", json={"n": 1}, timeout=10)
            assert answer.status_code == 204, answer.text
            wait_until(lambda: len(_orders(app)) >= 1, 30)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()[-3000:]
    [received] = _orders(app)
    assert (received.event["topic"], received.event["data"]) == (topic, {"n": 1})


def _assert_subscribed(moto: MotoServer, sns_topic: str, queue: str) -> None:
    """The SNS topic exists by that name and delivers to the queue of that name."""
    session = boto3.session.Session()
    sns = session.client("sns", endpoint_url=moto.endpoint_url, region_name=moto.region)
    sqs = session.client("sqs", endpoint_url=moto.endpoint_url, region_name=moto.region)
    try:
        arns = [t["TopicArn"] for page in sns.get_paginator("list_topics").paginate()
                for t in page["Topics"] if t["TopicArn"].rsplit(":", 1)[-1] == sns_topic]
        assert len(arns) == 1, sns_topic
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]
        endpoints = [s["Endpoint"] for s in sns.list_subscriptions_by_topic(
            TopicArn=arns[0])["Subscriptions"]]
        assert endpoints == [queue_arn]
    finally:
        sns.close()
        sqs.close()
