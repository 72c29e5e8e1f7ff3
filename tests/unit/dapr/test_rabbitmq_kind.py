"""``pubsub.rabbitmq`` components read as daprd reads them (components-contrib
``pubsub/rabbitmq/metadata.yaml`` defaults), with the decisions where daprd's defaults would
lose messages here warned about (``priority_pubsub/dapr/rabbitmq_kind.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.components import ComponentContext
from priority_pubsub.dapr.rabbitmq_kind import RabbitMQ
from priority_pubsub.settings.config import validate_config
from priority_pubsub.transforms.base import Payload
from tests.unit.dapr.test_plan import plan_for

ROUTE = [{"pubsubname": "tasks", "topic": "orders", "route": "orders"},
         {"pubsubname": "tasks", "topic": "orders-urgent", "route": "orders"}]


def component(**metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "dapr.io/v1alpha1", "kind": "Component",
            "metadata": {"name": "tasks"},
            "spec": {"type": "pubsub.rabbitmq", "version": "v1", "metadata": [
                {"name": key, "value": value} for key, value in metadata.items()]}}


def test_defaults_map_to_daprs_layout_with_auto_delete_refused(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, component(connectionString="amqp://u:p@rabbit:5672/"),
                    app=ROUTE, priorities=["orders-urgent"])
    settings = plan.settings()
    assert settings["driver"] == {
        "type": "rabbitmq", "url": "amqp://u:p@rabbit:5672/", "layout": "dapr",
        "consumer_id": "shop",  # consumerID defaults to the app id
        "durable": False, "delivery_mode": "transient"}  # Dapr's defaults
    # the driver reads topic T from queue {consumerID}-T bound to the fanout exchange T
    assert settings["queues"] == [{"name": "orders-urgent", "weight": 1},
                                  {"name": "orders", "weight": 1}]
    assert settings["retry"] == {"max_attempts": 1}  # requeueInFailure false: nack, gone
    [warning] = plan.warnings
    assert "deletedWhenUnused is true (Dapr's default) and not honoured" in warning
    validated = validate_config(settings)  # the driver takes what the kind maps
    assert validated.driver.type == "rabbitmq"


def test_explicit_settings_are_honoured_and_unhonoured_ones_named(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, component(
        hostname="rabbit:5672", username="app", password="s3cr/t", protocol="amqps",
        consumerID="workers", durable="true", deletedWhenUnused="false", deliveryMode="2",
        requeueInFailure="true", prefetchCount="50", queueType="quorum", maxLen="10"),
        app=ROUTE)
    driver = plan.settings()["driver"]
    assert driver["url"] == "amqps://app:s3cr%2Ft@rabbit:5672"
    assert (driver["consumer_id"], driver["durable"], driver["delivery_mode"],
            driver["queue_type"]) == ("workers", True, "persistent", "quorum")
    assert "retry" not in plan.settings()  # retried with this project's policy
    assert len(plan.warnings) == 2
    assert any("prefetchCount is read but not honoured: at most the free slots" in w
               for w in plan.warnings)
    assert any("metadata maxLen is read but not honoured" in w for w in plan.warnings)


@pytest.mark.parametrize(("metadata", "error"), [
    ({}, r"connectionString \(or hostname\) is required"),
    ({"host": "amqp://x", "deliveryMode": "7"}, "deliveryMode: 0, 1 or 2"),
])
def test_bad_metadata_is_one_clear_error(tmp_path: Path, metadata: dict[str, str],
                                         error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        plan_for(tmp_path, component(**metadata), app=ROUTE)


def test_headers_become_metadata_and_the_body_is_the_data() -> None:
    context = ComponentContext("tasks", "pubsub.rabbitmq", {}, "shop")
    unwrapped = RabbitMQ().unwrap(context, Payload(b"{}", {"tier": "gold"}, "application/json"))
    assert (unwrapped.data, unwrapped.metadata, unwrapped.content_type) == (
        b"{}", {"metadata.tier": "gold"}, "application/json")
