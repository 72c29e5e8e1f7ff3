"""A driver whose dead letters may go to a topic chosen per message, as daprd's
``sendToDeadLetter`` sends them (``pkg/runtime/subscription/subscription.go``): the data
published unchanged to the dead-letter topic, then the original acknowledged.

Two places choose such a topic: a Dapr subscription's ``deadLetterTopic``
(``dapr.dead_letters``) and a streaming subscription's own (``app.channel.streams``). Both wrap
the configured driver in a subclass of ``DeadLetterTopicDriver`` so the worker's one settle
call does it; every other verb and optional ability is the wrapped driver's.
"""

from __future__ import annotations

from typing import Any, ClassVar

from priority_pubsub.core.message import Message
from priority_pubsub.drivers.base import Driver, DriverOptions


class DeadLetterTopicDriver:
    """The wrapped driver's verbs, with ``dead_letter`` sent to ``_to_topic`` first; where
    that finds no topic, to the driver's own dead letters, or acked where it has none (the
    journal and the log keep the reason). Subclasses say where a message's topic is and what
    ``drop`` does."""

    name: ClassVar[str]
    options_model: ClassVar[type[DriverOptions]] = DriverOptions

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)  # depth, ping, publish, add_queue...: the driver's

    @property
    def dead_letter_enabled(self) -> bool:
        return True  # decided per message by dead_letter

    @property
    def releases_count_as_attempts(self) -> bool:
        return self._driver.releases_count_as_attempts

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

    async def extend(self, message: Message, duration_s: float) -> None:
        await self._driver.extend(message, duration_s)

    async def close(self) -> None:
        await self._driver.close()

    async def dead_letter(self, message: Message, reason: str) -> None:
        if await self._to_topic(message, reason):
            return
        if self._driver.dead_letter_enabled:
            await self._driver.dead_letter(message, reason)
        else:
            await self._driver.ack(message)  # the journal and the log keep the reason

    async def _to_topic(self, message: Message, reason: str) -> bool:
        """Publish ``message`` to its dead-letter topic and ack it; False when it has none."""
        raise NotImplementedError
