"""``priority-pubsub provision`` in Dapr mode: the entities daprd's snssqs component creates,
through the same code as native mode (``provision.aws``). Other component types are not
provisioned here. Above ``plan`` and ``snssqs``, so neither imports back."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.plan import DaprPlan
from priority_pubsub.dapr.snssqs import SnsSqs, entity_spec
from priority_pubsub.provision import Provisioned, aws_target
from priority_pubsub.provision.plan import Mode
from priority_pubsub.settings.config import Settings

if TYPE_CHECKING:
    from priority_pubsub.provision.aws import SqsSpec


def dapr_spec(plan: DaprPlan, settings: Settings) -> SqsSpec:
    """``entity_spec`` for a Dapr plan (``priority-pubsub provision`` in Dapr mode)."""
    broker_topic = plan.component.broker_topic
    return entity_spec([(q.name, tuple(map(broker_topic, q.topics))) for q in plan.queues],
                       settings.dead_letter.queue if settings.dead_letter else None)


def provision_plan_blocking(plan: DaprPlan, settings: Settings, mode: Mode) -> Provisioned:
    """``priority-pubsub provision`` in Dapr mode: daprd's snssqs entities, through the same
    code as native mode (other component types are not provisioned here)."""
    from priority_pubsub.provision.aws import provision_sqs

    if not isinstance(plan.kind, SnsSqs):
        raise ConfigError(f"provision: Dapr component {plan.component.type} is not "
                          "provisioned here (daprd's snssqs entities are)")
    return Provisioned(provision_sqs(dapr_spec(plan, settings), mode, **aws_target(settings)),
                       mode)


async def provision_plan(plan: DaprPlan, settings: Settings, mode: Mode) -> Provisioned:
    return await asyncio.to_thread(provision_plan_blocking, plan, settings, mode)
