"""Per-subscription dead-letter topics, settled the way daprd settles them.

daprd (``pkg/runtime/subscription/subscription.go`` ``sendToDeadLetter``) publishes the
message's data unchanged to the subscription's ``deadLetterTopic`` through the component,
then acknowledges the original. Without a dead-letter topic a *dropped* message (404, DROP,
no route, expired) is simply acknowledged, while a message that failed for good goes where
the component sends it (e.g. snssqs' ``sqsDeadLettersQueueName``) or is deleted.

``DeadLetterTopics`` wraps the driver so the worker's one settle call does this; every other
verb and optional ability is the wrapped driver's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from priority_pubsub.core.errors import DriverError
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.dapr.delivery import DaprDelivery
from priority_pubsub.drivers.base import Driver, DriverOptions
from priority_pubsub.telemetry.logs import get_logger
from priority_pubsub.transforms.base import Payload

log = get_logger(__name__)
TopicPublisher = Callable[[str, bytes], None]
"""Blocking ``publish(topic, data)`` through the component (run in a thread)."""


class DeadLetterTopics:
    name: ClassVar[str] = "dapr-dead-letter-topics"
    options_model: ClassVar[type[DriverOptions]] = DriverOptions

    def __init__(self, driver: Driver, delivery: DaprDelivery,
                 publish: TopicPublisher | None) -> None:
        self._driver = driver
        self._delivery = delivery
        self._publish = publish

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)  # depth, ping, publish...: the driver's own

    @property
    def dead_letter_enabled(self) -> bool:
        return True  # decided per message below

    async def start(self) -> None:
        await self._driver.start()

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        return await self._driver.receive(queue, max_messages, wait_s)

    async def ack(self, message: Message) -> None:
        await self._driver.ack(message)

    async def retry(self, message: Message, delay_s: float) -> None:
        await self._driver.retry(message, delay_s)

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        await self._driver.release(message, delay_s)

    @property
    def releases_count_as_attempts(self) -> bool:
        return self._driver.releases_count_as_attempts

    async def extend(self, message: Message, duration_s: float) -> None:
        await self._driver.extend(message, duration_s)

    async def close(self) -> None:
        await self._driver.close()

    async def drop(self, message: Message, reason: str) -> None:
        if not await self._to_topic(message):
            await self._driver.ack(message)

    async def dead_letter(self, message: Message, reason: str) -> None:
        if await self._to_topic(message):
            return
        if self._driver.dead_letter_enabled:
            await self._driver.dead_letter(message, reason)
        else:
            await self._driver.ack(message)  # the journal and the log keep the reason

    async def _to_topic(self, message: Message) -> bool:
        """Publish to the subscription's dead-letter topic and ack; False if it has none."""
        decoded = self._delivery.decode(
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
