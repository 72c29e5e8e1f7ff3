"""Live reload in Dapr mode: the resources directory is watched as daprd
1.18 watches it. A Subscription added is served in its place and one changed takes its new
route, a Component read again unchanged is a no-op (its ``{uuid}`` consumer group kept), a
Component whose connection changes is refused, a Subscription removed takes no more: the real
``priority-pubsub run`` on ``pubsub.redis`` (a Redis of the test's own), no signal sent."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.e2e.helpers import total
from tests.support.app import RecordingApp
from tests.support.dapr_resources import dapr_config, dapr_event, subscription_v2, write_resources
from tests.support.redis_server import OwnRedis
from tests.support.sidecar import SidecarProcess
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis
RELOADS = "priority_pubsub_config_reloads_total"
PUBSUB = "orderpubsub"


def component(port: int, consumer: str = "{uuid}") -> dict[str, Any]:
    return {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": PUBSUB},
            "spec": {"type": "pubsub.redis", "version": "v1", "metadata": [
                {"name": "redisHost", "value": f"127.0.0.1:{port}"},
                {"name": "consumerID", "value": consumer}]}}


def resources(directory: Path, *documents: dict[str, Any]) -> None:
    """Replace the directory's manifests with ``documents``: the files written, then the
    stale ones removed."""
    before = set(directory.glob("*.yaml"))
    write_resources(directory, *documents)
    written = {directory / f"{i:02d}-{d['kind'].lower()}-{d['metadata']['name']}.yaml"
               for i, d in enumerate(documents)}
    for stale in before - written:
        stale.unlink()


def wait_reloads(sidecar: SidecarProcess, result: str, count: int) -> None:
    def done() -> bool:
        assert sidecar.process.poll() is None, sidecar.logs()
        return total(sidecar.metrics(), RELOADS, result=result) >= count

    wait_until(done, timeout_s=5)  # a watched change is applied within 5 s


def test_subscriptions_and_components_changed_live(
    tmp_path: Path, own_redis: OwnRedis, app: RecordingApp
) -> None:
    directory = tmp_path / "resources"
    orders = subscription_v2("orders", PUBSUB, "orders", default="/orders")
    resources(directory, component(own_redis.port), orders)
    config = dapr_config(tmp_path, directory, "shop", app.url, driver={})
    config["dapr"]["programmatic_subscriptions"] = False
    raw = redis.Redis.from_url(own_redis.url)

    def publish(topic: str, data: str) -> None:
        raw.xadd(topic, {"data": dapr_event(data, topic=topic, pubsub=PUBSUB)})

    sidecar = SidecarProcess(tmp_path, config)
    try:
        sidecar.wait_ready(timeout_s=60)
        group = raw.xinfo_groups("orders")[0]["name"]
        resources(directory, component(own_redis.port), orders)  # the same, written anew
        wait_reloads(sidecar, "applied", 1)
        urgent = subscription_v2("urgent", PUBSUB, "urgent", default="/urgent",
                                 metadata={"priority": "0"})
        moved = subscription_v2("orders", PUBSUB, "orders", default="/orders-v2",
                                metadata={"priority": "1"})
        resources(directory, component(own_redis.port), moved, urgent)
        wait_reloads(sidecar, "applied", 2)
        publish("orders", "o-1")
        publish("urgent", "u-1")
        app.wait_for(2, timeout_s=20)
        resources(directory, component(own_redis.port + 1), moved, urgent)  # its connection
        wait_reloads(sidecar, "refused", 1)
        resources(directory, component(own_redis.port), moved)  # urgent removed
        wait_reloads(sidecar, "applied", 3)
        publish("urgent", "u-2")
        publish("orders", "o-2")
        app.wait_for(3, timeout_s=20)
        time.sleep(1.0)  # a take from urgent would have delivered by now
    finally:
        assert sidecar.stop() == 0
        raw.close()
    seen = [(r.path, r.event["data"]) for r in app.received]
    assert sorted(seen) == [("/orders-v2", "o-1"), ("/orders-v2", "o-2"), ("/urgent", "u-1")]
    assert [r.event["topic"] for r in app.received[2:]] == ["orders"]  # nothing more of urgent
    logs = [json.loads(line) for line in sidecar.logs().splitlines() if line.startswith("{")]
    reloaded = [line for line in logs if line.get("event") == "config reloaded"]
    assert reloaded[0]["changed"] == []  # read again unchanged: a no-op, {uuid} and all
    assert "queues.urgent (added)" in reloaded[1]["changed"]
    assert "queues.urgent (removed)" in reloaded[2]["changed"]
    [refused] = [line for line in logs if line.get("event", "").startswith("config reload ref")]
    assert any(key.startswith("driver.") for key in refused["restart_only"]), refused
    assert [g["name"] for g in raw_groups(own_redis, "orders")] == [group]  # one group, kept


def raw_groups(own_redis: OwnRedis, stream: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(own_redis.url)
    try:
        return list(client.xinfo_groups(stream))
    finally:
        client.close()
