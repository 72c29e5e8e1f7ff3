"""Dapr mode on Redis: the pub/sub quickstart's own ``components/pubsub.yaml``
(``pubsub.redis``, dapr/quickstarts ``pub_sub/components``) and its subscriber app, behind the
real sidecar; orders are written as daprd's ``pubsub.redis`` Publish writes them
(``XADD orders * data <cloudevent>``), or published by the quickstart's checkout apps through
the sidecar's publish API. The component file is used as published, except that
``localhost:6379`` points at a redis-server of the test's own (the quickstart's topic
``orders`` must not meet other tests' entries on the shared server)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis
import yaml

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.components import ComponentContext
from priority_pubsub.dapr.redis_kind import RedisStreams, go_duration_s
from tests.e2e.helpers import assert_each_order_once
from tests.support.app import RecordingApp
from tests.support.app_venv import running_app
from tests.support.dapr_resources import dapr_config, dapr_event, subscription_v2, write_resources
from tests.support.quickstarts import (
    CHECKOUTS,
    FLASK,
    ORDERS,
    QUICKSTARTS,
    checkout_to_subscriber,
    orders_received,
    publish_api,
)
from tests.support.redis_server import OwnRedis
from tests.support.sidecar import SidecarProcess, start_sidecar
from tests.support.topologies.redis import group_lag

pytestmark = [pytest.mark.redis, pytest.mark.app_deps(
    QUICKSTARTS / "http-order-processor", *(QUICKSTARTS / c for c in CHECKOUTS))]
QUICKSTART_COMPONENT = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: orderpubsub
spec:
  type: pubsub.redis
  version: v1
  metadata:
  - name: redisHost
    value: localhost:6379
  - name: redisPassword
    value: ""
"""


def _quickstart_resources(tmp_path: Path, own_redis: OwnRedis) -> Path:
    """The quickstart's component, its ``localhost:6379`` pointed at the test's own Redis."""
    resources = tmp_path / "resources"
    resources.mkdir()
    (resources / "pubsub.yaml").write_text(
        QUICKSTART_COMPONENT.replace("localhost:6379", f"127.0.0.1:{own_redis.port}"))
    return resources


def test_quickstart_redis_component_and_subscriber_get_every_order_once(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    resources = _quickstart_resources(tmp_path, own_redis)
    app_id = f"order-processor-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(own_redis.url)
    with running_app(QUICKSTARTS / "http-order-processor", FLASK, tmp_path / "app.log") as app:
        config = dapr_config(tmp_path, resources, app_id, app.url, driver={})
        sidecar = start_sidecar(tmp_path, config, ready_timeout_s=60)
        try:
            for order_id in range(1, ORDERS + 1):
                raw.xadd("orders", {"data": dapr_event({"orderId": order_id}, topic="orders",
                                                       pubsub="orderpubsub")})
            received = orders_received(app, ORDERS)
        finally:
            assert sidecar.stop() == 0
    assert_each_order_once(received, app, tmp_path / "journal", ORDERS)
    [group] = raw.xinfo_groups("orders")  # daprd's layout: group = consumerID = the app id
    assert (group["name"].decode(), group["pending"], group_lag(raw, "orders", group)) == (
        app_id, 0, 0)
    raw.close()


@pytest.mark.parametrize("checkout", CHECKOUTS)
def test_quickstart_checkout_publishes_through_the_redis_component(
    tmp_path: Path, own_redis: OwnRedis, checkout: str
) -> None:
    """The pinned checkout publishers (HTTP, and the SDK over gRPC) through the sidecar's
    publish API onto the quickstart's component, as daprd's Publish writes: ``XADD orders *
    data <cloudevent>``; the subscriber behind the same sidecar gets every order once."""
    resources = _quickstart_resources(tmp_path, own_redis)
    api = publish_api()
    with running_app(QUICKSTARTS / "http-order-processor", FLASK, tmp_path / "app.log") as app:
        config = dapr_config(tmp_path, resources, "order-processor", app.url, driver={},
                             publish_api=api)
        _, received = checkout_to_subscriber(tmp_path, config, checkout, api, app,
                                             ready_timeout_s=60)
    assert_each_order_once(received, app, tmp_path / "journal", ORDERS)
    raw = redis.Redis.from_url(own_redis.url)
    entries = raw.xrange("orders")
    raw.close()
    assert [set(fields) for _, fields in entries] == [{b"data"}] * ORDERS  # daprd's layout
    event = json.loads(entries[0][1][b"data"])
    assert (event["topic"], event["pubsubname"]) == ("orders", "orderpubsub")


def test_dapr_mode_imports_the_components_driver_only(
    tmp_path: Path, own_redis: OwnRedis, app: RecordingApp
) -> None:
    """Memory per pod: a sidecar in Dapr mode on ``pubsub.redis`` imports neither
    the default local driver (sqlite3: 1.1 MB, when relative driver paths were looked up in
    its model before the component named the driver) nor OpenTelemetry (redis-py pulls it in
    when installed; tracing is not configured). ``sys.modules`` is written at exit."""
    component = yaml.safe_load(QUICKSTART_COMPONENT.replace(
        "localhost:6379", f"127.0.0.1:{own_redis.port}"))
    resources = write_resources(tmp_path / "resources", component,
                                subscription_v2("orders", "orderpubsub", "orders",
                                                default="/orders"))
    config = dapr_config(tmp_path, resources, "footprint", app.url, driver={})
    config["dapr"]["programmatic_subscriptions"] = False
    hook, dump = tmp_path / "hook", tmp_path / "modules.json"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps(sorted("
        "k for k, v in sys.modules.items() if v is not None))))\n")
    sidecar = SidecarProcess(tmp_path, config, env={"PYTHONPATH": str(hook)})
    try:
        sidecar.wait_ready(timeout_s=60)
    finally:
        assert sidecar.stop() == 0
    imported = set(json.loads(dump.read_text()))
    assert "priority_pubsub.drivers.redis.driver" in imported
    assert sorted(name for name in imported if name.split(".")[0] in ("sqlite3", "opentelemetry")
                  or name.startswith("priority_pubsub.drivers.local")) == []


def test_component_metadata_maps_onto_the_driver() -> None:
    component = ComponentContext(
        name="pubsub", type="pubsub.redis", app_id="shop", metadata={
            "redisHost": "redis.data:6380", "redisPassword": "pw", "enableTLS": "true",
            "redisDB": "2", "consumerID": "workers", "processingTimeout": "2m30s",
            "redeliverInterval": "5000", "maxLenApprox": "10000", "queueDepth": "100"})
    mapped = RedisStreams().map(component)
    assert mapped.driver == {
        "type": "redis", "url": "rediss://redis.data:6380/2", "group": "workers",
        "password": "pw", "max_len_approx": 10000, "reclaim_interval_s": 5.0}
    assert mapped.settings["lease"] == {"duration_s": 150.0}
    assert mapped.settings["retry"] == {"initial_delay_s": 150.0, "max_delay_s": 150.0}
    assert "queueDepth" not in mapped.honoured  # warned as read but not honoured
    assert RedisStreams().queue_for(component, "orders") == "orders"


@pytest.mark.parametrize(("text", "seconds"), [("60000", 60.0), ("1m30s", 90.0),
                                               ("500ms", 0.5), ("1h", 3600.0)])
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration_s("processingTimeout", text) == pytest.approx(seconds)


def test_bad_duration_names_the_key() -> None:
    with pytest.raises(ConfigError, match="processingTimeout"):
        go_duration_s("processingTimeout", "soon")
