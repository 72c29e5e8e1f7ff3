"""Dapr mode on Redis: the pub/sub quickstart's own ``components/pubsub.yaml``
(``pubsub.redis``, dapr/quickstarts ``pub_sub/components``) and its subscriber app, behind the
real sidecar; orders are written as daprd's ``pubsub.redis`` Publish writes them
(``XADD orders * data <cloudevent>``). The component file is used as published, except that
``localhost:6379`` points at a redis-server of the test's own (the quickstart's topic
``orders`` must not meet other tests' entries on the shared server)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import redis

from priority_pubsub.dapr.components import ComponentContext
from priority_pubsub.dapr.redis_kind import RedisStreams, go_duration_s
from priority_pubsub.errors import ConfigError
from tests.e2e.helpers import journal_records
from tests.e2e.test_dapr_quickstarts import FLASK, QUICKSTARTS, _orders_received
from tests.support.app_venv import running_app
from tests.support.dapr_resources import dapr_config, dapr_event
from tests.support.redis_server import OwnRedis
from tests.support.sidecar import start_sidecar

pytestmark = pytest.mark.redis
ORDERS = 9
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


def test_quickstart_redis_component_and_subscriber_get_every_order_once(
    tmp_path: Path, own_redis: OwnRedis
) -> None:
    resources = tmp_path / "resources"
    resources.mkdir()
    (resources / "pubsub.yaml").write_text(
        QUICKSTART_COMPONENT.replace("localhost:6379", f"127.0.0.1:{own_redis.port}"))
    app_id = f"order-processor-{uuid.uuid4().hex[:8]}"
    raw = redis.Redis.from_url(own_redis.url)
    with running_app(QUICKSTARTS / "http-order-processor", FLASK, tmp_path / "app.log") as app:
        config = dapr_config(tmp_path, resources, app_id, app.url, driver={})
        sidecar = start_sidecar(tmp_path, config, ready_timeout_s=60)
        try:
            for order_id in range(1, ORDERS + 1):
                raw.xadd("orders", {"data": dapr_event({"orderId": order_id}, topic="orders",
                                                       pubsub="orderpubsub")})
            received = _orders_received(app, ORDERS)
            time.sleep(0.5)
        finally:
            assert sidecar.stop() == 0
    assert sorted(received) == list(range(1, ORDERS + 1)), app.output()
    assert [r["outcome"] for r in journal_records(tmp_path / "journal")] == ["ack"] * ORDERS
    [group] = raw.xinfo_groups("orders")  # daprd's layout: group = consumerID = the app id
    assert (group["name"].decode(), group["pending"], group["lag"]) == (app_id, 0, 0)
    raw.close()


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
