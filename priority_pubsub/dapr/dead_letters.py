"""Per-subscription dead-letter topics, settled the way daprd settles them.

daprd (``pkg/runtime/subscription/subscription.go`` ``sendToDeadLetter``) publishes the
message's data unchanged to the subscription's ``deadLetterTopic`` through the component,
then acknowledges the original. Without a dead-letter topic a *dropped* message (404, DROP,
no route, expired) is simply acknowledged, while a message that failed for good goes where
the component sends it (e.g. snssqs' ``sqsDeadLettersQueueName``) or is deleted.

``DeadLetterTopics`` wraps the driver (a ``drivers.dead_letter_topics.DeadLetterTopicDriver``)
so the worker's one settle call does this; every other verb and optional ability is the
wrapped driver's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ClassVar

from priority_pubsub.core.errors import DriverError
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.dapr.request_builder import DaprRequestBuilder
from priority_pubsub.drivers.base import Driver
from priority_pubsub.drivers.dead_letter_topics import DeadLetterTopicDriver
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.transforms.base import Payload

log = get_logger(__name__)
TopicPublisher = Callable[[str, bytes], None]
"""Blocking ``publish(topic, data)`` through the component (run in a thread)."""


class DeadLetterTopics(DeadLetterTopicDriver):
    name: ClassVar[str] = "dapr-dead-letter-topics"

    def __init__(self, driver: Driver, request_builder: DaprRequestBuilder,
                 publish: TopicPublisher | None) -> None:
        super().__init__(driver)
        self._request_builder = request_builder
        self._publish = publish

    async def drop(self, message: Message, reason: str) -> None:
        if not await self._to_topic(message, reason):
            await self._driver.ack(message)

    async def _to_topic(self, message: Message, reason: str) -> bool:
        """Publish to the subscription's dead-letter topic and ack; False if it has none."""
        decoded = self._request_builder.decode(
            message, Payload(message.body, dict(message.attributes), message.content_type))
        if isinstance(decoded, Outcome) or not decoded.subscription.dead_letter_topic:
            return False
        topic = decoded.subscription.dead_letter_topic
        if self._publish is None:
            log.warning("deadLetterTopic not supported for this component: using the "
                        "driver's dead letters", topic=topic, message_id=message.id)
            return False
        try:
            await asyncio.to_thread(self._publish, topic, decoded.data)
        except Exception as exc:  # boto3 / SDK errors: retried by the settle loop
            raise DriverError(f"publish to dead-letter topic {topic} failed: {exc}",
                              retriable=True) from exc
        await self._driver.ack(message)
        return True
