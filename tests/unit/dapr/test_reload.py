"""Dapr mode's live reload against the running resources: what
``dapr.reload.compare`` makes of a resources directory read again, through the loading path
of start (``setup.load``), then the same ``reload_diff`` as native mode; the request builder
following the new plan, a removed topic's in-flight messages still routed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from priority_pubsub import cli
from priority_pubsub.core.message import Lease, Message
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.dapr.reload import compare
from priority_pubsub.dapr.request_builder import DaprRequestBuilder, Decoded
from priority_pubsub.dapr.setup import Loaded, load
from priority_pubsub.settings.reload import ReloadDiff, reload_diff
from priority_pubsub.transforms.base import Payload
from tests.support.dapr_resources import dapr_config, dapr_event, subscription_v2, write_resources
from tests.unit.dapr.test_resiliency import resiliency

PUBSUB = "orderpubsub"


def component(host: str = "127.0.0.1:6379", consumer: str = "{uuid}") -> dict[str, Any]:
    return {"apiVersion": "dapr.io/v1alpha1", "kind": "Component", "metadata": {"name": PUBSUB},
            "spec": {"type": "pubsub.redis", "version": "v1", "metadata": [
                {"name": "redisHost", "value": host}, {"name": "consumerID", "value": consumer}]}}


ORDERS = subscription_v2("orders", PUBSUB, "orders", default="/orders")
URGENT = subscription_v2("urgent", PUBSUB, "urgent", default="/urgent",
                         metadata={"priority": "0"})


def loaded(directory: Path, *documents: dict[str, Any]) -> Loaded:
    """The resources as a sidecar started on them (or a reload) reads them."""
    resources = directory / "resources"
    for old in resources.glob("*.yaml"):
        old.unlink()
    write_resources(resources, *documents)
    config = dapr_config(directory.parent, resources, "shop", "http://127.0.0.1:1", driver={})
    config["dapr"]["programmatic_subscriptions"] = False
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return load(path, DaprdFlags(), reach_app=False)


def reload_of(tmp_path: Path, before: tuple[dict[str, Any], ...],
              after: tuple[dict[str, Any], ...]) -> tuple[ReloadDiff, tuple[str, ...],
                                                          tuple[str, ...]]:
    running = loaded(tmp_path, *before)
    compared = compare(running, loaded(tmp_path, *after))
    diff = reload_diff(running.settings, compared.settings, can_add_queues=True)
    return diff, compared.restart_only, compared.changed


def test_resources_read_again_unchanged_are_a_no_op_uuid_templates_and_all(
    tmp_path: Path
) -> None:
    running = loaded(tmp_path, component(), ORDERS)
    again = loaded(tmp_path, component(), ORDERS)
    assert again.settings.driver != running.settings.driver  # a new {uuid} consumer group
    compared = compare(running, again)
    assert compared.settings.driver == running.settings.driver  # the running one kept
    assert compared.settings.driver_options == running.settings.driver_options
    assert reload_diff(running.settings, compared.settings, can_add_queues=False) == ReloadDiff()
    assert (compared.restart_only, compared.changed) == ((), ())


@pytest.mark.parametrize(("after", "applied", "changed"), [
    ((component(), ORDERS, URGENT), ["queues.urgent (added)"], []),
    ((component(), subscription_v2("orders", PUBSUB, "orders", default="/orders-v2")), [],
     ["Subscription orders (changed)"]),
    ((component(), subscription_v2("orders", PUBSUB, "orders", default="/orders",
                                   metadata={"reserve": "0", "timeout_s": "9"})),
     ["queues.orders.timeout_s"], ["Subscription orders (changed)"]),
    ((component(), ORDERS, resiliency({"retry": "steady", "timeout": "general"})),
     ["retry.initial_delay_s", "retry.max_attempts", "retry.max_delay_s"],
     []),  # its timeout too, but config.yaml's app.timeout_s wins over it
])
def test_what_a_reload_of_the_resources_applies(
    tmp_path: Path, after: tuple[dict[str, Any], ...], applied: list[str], changed: list[str]
) -> None:
    diff, restart_only, found = reload_of(tmp_path, (component(), ORDERS), after)
    assert (sorted(diff.applied), list(found)) == (applied, changed)
    assert diff.refused + restart_only == ()


def test_a_component_whose_connection_changes_is_restart_only(tmp_path: Path) -> None:
    diff, restart_only, _ = reload_of(tmp_path, (component(), ORDERS),
                                      (component("10.0.0.9:6379", "workers"), ORDERS))
    assert sorted(diff.refused) == ["driver.group", "driver.url"]
    assert restart_only == ()
    renamed = {**component(), "metadata": {"name": "other"}}
    moved = subscription_v2("orders", "other", "orders", default="/orders")
    _, restart_only, _ = reload_of(tmp_path, (component(), ORDERS), (renamed, moved))
    assert restart_only == (f"Component {PUBSUB} (pubsub.redis) replaced by other "
                            "(pubsub.redis)",)


def test_bulk_delivery_changed_is_restart_only(tmp_path: Path) -> None:
    bulk = {**ORDERS, "spec": {**ORDERS["spec"], "bulkSubscribe": {"enabled": True}}}
    _, restart_only, _ = reload_of(tmp_path, (component(), ORDERS), (component(), bulk))
    assert restart_only == ("Subscription orders: bulkSubscribe",)


def message(queue: str, topic: str) -> tuple[Message, Payload]:
    body = dapr_event("x", topic=topic, pubsub=PUBSUB)
    return (Message("1-0", queue, 0, body, {}, 1, 0, Lease(None, 0)),
            Payload(body, {}, "application/cloudevents+json"))


def test_the_request_builder_follows_a_new_plan_and_keeps_a_removed_topics_route(
    tmp_path: Path
) -> None:
    running = loaded(tmp_path, component(), ORDERS, URGENT)
    assert running.plan is not None
    request_builder = DaprRequestBuilder(running.plan, running.settings.app)
    moved = subscription_v2("orders", PUBSUB, "orders", default="/orders-v2")
    new = loaded(tmp_path, component(), moved)
    assert new.plan is not None
    request_builder.use_plan(new.plan)
    orders = request_builder.decode(*message("orders", "orders"))
    urgent = request_builder.decode(*message("urgent", "urgent"))  # in flight when it was removed
    assert isinstance(orders, Decoded)
    assert isinstance(urgent, Decoded)
    assert orders.subscription.rules[-1].path == "/orders-v2"
    assert urgent.subscription.rules[-1].path == "/urgent"


def test_check_reload_safe_reads_resources_as_the_sidecar_does(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    loaded(old, component(), ORDERS)
    loaded(new, component(), subscription_v2("orders", PUBSUB, "orders", default="/v2"), URGENT)
    result = CliRunner().invoke(cli.app, ["check", "--reload-safe", str(old / "config.yaml"),
                                          str(new / "config.yaml")])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["applied   queues.urgent (added)",
                                          "applied   Subscription orders (changed)"]
    loaded(new, component("10.0.0.9:6379"), ORDERS)
    refused = CliRunner().invoke(cli.app, ["check", "--reload-safe", str(old / "config.yaml"),
                                           str(new / "config.yaml")])
    assert refused.exit_code == 1
    assert "REFUSED   driver.url (restart-only)" in refused.stdout
