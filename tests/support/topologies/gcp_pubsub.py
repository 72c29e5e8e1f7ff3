"""The Pub/Sub topology on the session's emulator: a topic and subscription per queue (the
subscription id is the queue name), each with a dead-letter policy to one dead-letter topic
that has a reader subscription."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from google.pubsub_v1 import PublisherClient, SubscriberClient
from google.pubsub_v1.types import DeadLetterPolicy, PubsubMessage, ReceivedMessage, Subscription

from priority_pubsub.drivers.gcp_pubsub.driver import DEAD_LETTER_REASON
from tests.support.gcp_pubsub_emulator import PROJECT
from tests.support.topologies.base import DeadLetter


class PubSubTopology:
    """Sync gapic clients: the e2e tests are sync, and async driver tests may call them."""

    driver_type: ClassVar[str] = "gcp_pubsub"

    def __init__(self) -> None:
        self.publisher = PublisherClient()
        self.subscriber = SubscriberClient()
        self.uid = uuid.uuid4().hex[:10]
        self.dead = self.topic("dead")
        self.dead_reader = self.subscription("dead-read", self.dead, policy=False)

    def path(self, kind: str, name: str) -> str:
        return f"projects/{PROJECT}/{kind}/{name}"

    def topic(self, suffix: str) -> str:
        name = f"{suffix}-{self.uid}"
        self.publisher.create_topic(name=self.path("topics", name))
        return name

    def subscription(self, suffix: str, topic: str, *, policy: bool = True,
                     ack_deadline_s: int = 10, max_delivery_attempts: int = 100) -> str:
        name = f"{suffix}-{self.uid}"
        dead_letter = DeadLetterPolicy(dead_letter_topic=self.path("topics", self.dead),
                                       max_delivery_attempts=max_delivery_attempts)
        self.subscriber.create_subscription(request=Subscription(
            name=self.path("subscriptions", name), topic=self.path("topics", topic),
            ack_deadline_seconds=ack_deadline_s, dead_letter_policy=dead_letter if policy else None,
        ))
        return name

    def queue(self, suffix: str, lease_s: float = 2.0, *, policy: bool = True,
              ack_deadline_s: int = 10) -> str:
        """A topic ``t-<suffix>`` and its subscription; the subscription id is the queue."""
        return self.subscription(suffix, self.topic(f"t-{suffix}"), policy=policy,
                                 ack_deadline_s=ack_deadline_s)

    def topic_of(self, queue: str) -> str:
        return str(self.subscriber.get_subscription(
            subscription=self.path("subscriptions", queue)).topic)

    def publish(self, queue: str, body: bytes,
                attributes: Mapping[str, str] | None = None) -> None:
        self.publisher.publish(topic=self.topic_of(queue), messages=[
            PubsubMessage(data=body, attributes=dict(attributes or {}))])

    def pull(self, queue: str, wait_s: float = 2) -> list[ReceivedMessage]:
        """Whatever ``queue`` delivers within ``wait_s`` (acked)."""
        path = self.path("subscriptions", queue)
        answer = self.subscriber.pull(subscription=path, max_messages=50, timeout=wait_s + 1)
        if answer.received_messages:
            self.subscriber.acknowledge(
                subscription=path, ack_ids=[r.ack_id for r in answer.received_messages])
        return list(answer.received_messages)

    def dead_letters(self) -> list[DeadLetter]:
        letters: list[DeadLetter] = []
        while batch := self.pull(self.dead_reader):
            for item in batch:
                attributes = dict(item.message.attributes)
                letters.append(DeadLetter(item.message.data, attributes,
                                          attributes.get(DEAD_LETTER_REASON)))
        return letters

    def driver_options(self) -> dict[str, Any]:
        return {"type": self.driver_type, "project": PROJECT}

    def dead_letter_config(self) -> dict[str, Any] | None:
        return {"queue": self.dead}

    def close(self) -> None:
        for client in (self.publisher, self.subscriber):
            close: Callable[[], None] = client.transport.close  # untyped in the SDK
            close()
