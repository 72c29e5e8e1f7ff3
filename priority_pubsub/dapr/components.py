"""Which driver serves which Dapr pub/sub component type, and how the component's settings
map onto this project's: one small class per component type (the registry of them all is
``dapr.kinds``, above this module and the kinds' own modules).

A new driver adds its component type with ``kinds.register(MyKind())`` (the Redis and
RabbitMQ drivers add ``pubsub.redis`` and ``pubsub.rabbitmq`` this way). A kind says: the driver and
its options, the settings the component's metadata governs (retries, lease, dead letters),
the queue a topic is read from, and how a received body becomes the bytes and metadata
daprd's component hands to the runtime (``unwrap``). Provisioning entities and publishing to
dead-letter topics are optional abilities (``snssqs`` has both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from priority_pubsub.dapr.naming import per_topic_queue
from priority_pubsub.transforms.base import Payload


@dataclass(frozen=True)
class ComponentContext:
    """A component as this app sees it: its name (the ``pubsubname``), type, metadata with
    secrets resolved, and the app id (daprd's default ``consumerID``)."""

    name: str
    type: str
    metadata: Mapping[str, str]
    """Secrets resolved and templates applied (``dapr.templates``)."""
    app_id: str
    source: str = ""
    topic_prefix: str = ""
    """``NAMESPACE`` when the component is namespace-scoped (``{namespace}`` in its metadata,
    ``MetadataTemplates.topic_prefix``), else empty."""

    @property
    def consumer_id(self) -> str:
        """daprd's (``processor/pubsub`` ``Init``): trimmed, the app id when empty."""
        return self.metadata.get("consumerID", "").strip() or self.app_id

    def broker_topic(self, topic: str) -> str:
        """``topic`` as the broker names it. daprd prefixes a namespace-scoped component's
        topics with the namespace, no separator, to publish (``publisher.go``), subscribe
        and bulk subscribe (``subscription.go``, ``bulksubscription.go``) and dead-letter
        (through ``Publish``); the app, the subscriptions, the CloudEvent and the metadata
        API keep the topic as the app names it. Every topic that crosses to the broker goes
        through here (``DaprPlan``, ``BrokerTopics``), so no kind knows of namespaces."""
        return self.topic_prefix + topic

    def flag(self, key: str) -> bool:
        return self.metadata.get(key, "").strip().lower() in ("true", "1", "yes", "on")


@dataclass(frozen=True)
class Mapped:
    """What a component contributes to the settings (config.yaml wins over every key)."""

    driver: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    honoured: frozenset[str] = frozenset()
    """Metadata keys acted on; every other key gets a "read but not honoured" warning."""
    environment: dict[str, str] = field(default_factory=dict)
    """Variables for this process (credentials the driver's SDK chain reads first)."""
    warnings: tuple[str, ...] = ()
    """Metadata this kind reads and decides against (with why), beyond "not honoured"."""


@dataclass(frozen=True)
class Unwrapped:
    """What daprd's component hands the runtime for one message (``pubsub.NewMessage``)."""

    data: bytes
    topic_key: str | None = None
    """The topic the broker says the message came from, as the broker names it (SNS: the
    sanitised name in ``TopicArn``); None when the queue has one topic."""
    metadata: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None


class Entities(Protocol):
    """Optional ability of a kind: create what daprd creates at start, publish to a topic."""

    def ensure(self, queues: list[tuple[str, tuple[str, ...]]],
               dead_letter_queue: str | None) -> None: ...

    def publish(self, topic: str, data: bytes) -> None: ...


class BrokerTopics:
    """A kind's ``Entities`` taking the app's topic names: each becomes the broker's
    (``ComponentContext.broker_topic``) on its way in."""

    def __init__(self, entities: Entities, component: ComponentContext) -> None:
        self._entities = entities
        self._component = component

    @property
    def manage(self) -> bool:
        """Whether the wrapped entities are created at all (snssqs'
        ``disableEntityManagement``)."""
        return bool(getattr(self._entities, "manage", True))

    def ensure(self, queues: list[tuple[str, tuple[str, ...]]],
               dead_letter_queue: str | None) -> None:
        broker_topic = self._component.broker_topic
        self._entities.ensure([(queue, tuple(map(broker_topic, topics)))
                               for queue, topics in queues], dead_letter_queue)

    def publish(self, topic: str, data: bytes) -> None:
        self._entities.publish(self._component.broker_topic(topic), data)


class ComponentKind:
    """The base: one queue per topic named ``{consumerID}-{topic}``, the body as data.

    Every ``topic`` a kind is given is the broker's (``ComponentContext.broker_topic``)."""

    type: ClassVar[str] = ""
    driver: ClassVar[str] = ""

    def map(self, component: ComponentContext) -> Mapped:
        return Mapped({"type": self.driver})

    def queue_for(self, component: ComponentContext, topic: str) -> str:
        return per_topic_queue(component.consumer_id, topic)

    def shared_queue(self, component: ComponentContext) -> str | None:
        """The one queue daprd reads every topic from, if the component shares one."""
        return None

    def topic_key(self, topic: str) -> str:
        """How a topic is named where a message carries it (see ``Unwrapped.topic_key``)."""
        return topic

    def unwrap(self, component: ComponentContext, payload: Payload) -> Unwrapped:
        """Raises ``TransformError`` when the body cannot be what this component receives."""
        return Unwrapped(payload.body, None, {}, payload.content_type)

    def entities(self, component: ComponentContext, driver: Mapping[str, Any]
                 ) -> Entities | None:
        """Entity management and topic publishing, where this project implements them."""
        return None


class GcpPubSub(ComponentKind):
    """``pubsub.gcp.pubsub``: subscription ``{consumerID}-{topic}`` (components-contrib
    ``BuildSubscriptionID``); the message data is the CloudEvent; no metadata passed on."""

    type = "pubsub.gcp.pubsub"
    driver = "gcp_pubsub"

    def map(self, component: ComponentContext) -> Mapped:
        md = component.metadata
        driver: dict[str, Any] = {"type": self.driver}
        if md.get("projectId"):
            driver["project"] = md["projectId"]
        if md.get("endpoint"):
            driver["endpoint"] = md["endpoint"]
        settings: dict[str, Any] = {}
        if md.get("maxDeliveryAttempts"):
            settings["retry"] = {"max_attempts": int(md["maxDeliveryAttempts"])}
        if md.get("deadLetterTopic"):
            settings["dead_letter"] = {"queue": md["deadLetterTopic"]}
        return Mapped(driver, settings, frozenset(
            {"projectId", "endpoint", "maxDeliveryAttempts", "deadLetterTopic", "consumerID"}))


class ServiceBusTopics(ComponentKind):
    """``pubsub.azure.servicebus.topics``: subscription ``consumerID`` on each topic; the
    driver names it ``topic/subscription``. Application properties become ``metadata.*``."""

    type = "pubsub.azure.servicebus.topics"
    driver = "azure_servicebus"

    def map(self, component: ComponentContext) -> Mapped:
        md = component.metadata
        driver: dict[str, Any] = {"type": self.driver}
        if md.get("connectionString"):
            driver["connection_string"] = md["connectionString"]
        elif md.get("namespaceName"):
            driver["namespace"] = md["namespaceName"]
        settings: dict[str, Any] = {}
        if md.get("maxDeliveryCount"):
            settings["retry"] = {"max_attempts": int(md["maxDeliveryCount"])}
        if md.get("lockDurationInSec"):
            settings["lease"] = {"duration_s": float(md["lockDurationInSec"])}
        return Mapped(driver, settings, frozenset({
            "connectionString", "namespaceName", "maxDeliveryCount", "lockDurationInSec",
            "consumerID"}))

    def queue_for(self, component: ComponentContext, topic: str) -> str:
        return f"{topic}/{component.consumer_id}"

    def unwrap(self, component: ComponentContext, payload: Payload) -> Unwrapped:
        metadata = {f"metadata.{name}": value for name, value in payload.attributes.items()}
        return Unwrapped(payload.body, None, metadata, payload.content_type)


class ServiceBusQueues(ServiceBusTopics):
    """``pubsub.azure.servicebus.queues``: the topic is the queue's name."""

    type = "pubsub.azure.servicebus.queues"

    def queue_for(self, component: ComponentContext, topic: str) -> str:
        return topic
