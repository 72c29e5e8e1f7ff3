"""The registry of Dapr component kinds: which ``ComponentKind`` serves a component type.

The built-in kinds are registered when this module is imported; ``register`` adds or
replaces one (a kind registered later replaces the built-in of its type). It sits above
``components`` (the kind protocol and the kinds without modules of their own) and the kinds'
modules, so none of them imports back.
"""

from __future__ import annotations

from priority_pubsub.dapr.components import (
    ComponentKind,
    GcpPubSub,
    ServiceBusQueues,
    ServiceBusTopics,
)
from priority_pubsub.dapr.rabbitmq_kind import RabbitMQ
from priority_pubsub.dapr.redis_kind import RedisStreams
from priority_pubsub.dapr.snssqs import SnsSqs

_KINDS: dict[str, ComponentKind] = {
    kind.type: kind
    for kind in (SnsSqs(), GcpPubSub(), ServiceBusTopics(), ServiceBusQueues(), RedisStreams(),
                 RabbitMQ())
}


def register(kind: ComponentKind) -> None:
    """Add (or replace) the mapping for ``kind.type``."""
    _KINDS[kind.type] = kind


def kind_for(component_type: str) -> ComponentKind | None:
    return _KINDS.get(component_type)


def supported_types() -> list[str]:
    return sorted(_KINDS)
