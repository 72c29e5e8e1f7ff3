"""``provision`` in Dapr mode, without AWS: the entities daprd's snssqs component would create
for a plan (a queue per topic, the topic's sanitised SNS name, the dead-letters queue), and
the refusal of any other component type before anything is called."""

from __future__ import annotations

from pathlib import Path

import pytest

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.provisioning import dapr_spec, provision_plan_blocking
from priority_pubsub.provision.aws import QueueSpec, SqsSpec
from priority_pubsub.provision.plan import Mode
from priority_pubsub.settings.config import validate_config
from tests.unit.dapr.test_plan import COMPONENT, plan_for
from tests.unit.dapr.test_rabbitmq_kind import component as rabbitmq_component

SUBSCRIPTIONS = [{"pubsubname": "orderpubsub", "topic": "orders.high", "route": "orders"},
                 {"pubsubname": "orderpubsub", "topic": "orders", "route": "orders"}]


def test_a_queue_per_topic_subscribed_to_its_sanitised_topic(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, app=SUBSCRIPTIONS)
    spec = dapr_spec(plan, validate_config(plan.settings()))
    assert spec == SqsSpec((QueueSpec("shop-ordershigh", topics=("ordershigh",)),
                            QueueSpec("shop-orders", topics=("orders",))), None)


def test_the_dead_letters_queue_comes_from_the_settings(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, COMPONENT, app=SUBSCRIPTIONS[1:])
    settings = validate_config({**plan.settings(), "dead_letter": {"queue": "shop-dead"}})
    assert dapr_spec(plan, settings).dead_letter_queue == "shop-dead"


def test_another_component_type_is_refused_naming_it(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, rabbitmq_component(connectionString="amqp://u:p@rabbit:5672/"),
                    app=[{"pubsubname": "tasks", "topic": "orders", "route": "orders"}])
    with pytest.raises(ConfigError, match=r"pubsub\.rabbitmq is not provisioned here"):
        provision_plan_blocking(plan, validate_config(plan.settings()), Mode(dry_run=True))
