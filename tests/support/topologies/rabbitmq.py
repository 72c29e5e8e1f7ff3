"""The RabbitMQ topology on the machine's shared server (unique names): plain queues
declared durable, the dead-letter exchange and queue ``{prefix}-dead`` (the driver declares
and binds them itself at start), everything deleted again by ``close``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from priority_pubsub.drivers.base import DEAD_LETTER_REASON
from tests.support.rabbitmq_admin import SyncRabbit
from tests.support.topologies.base import DeadLetter


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


class RabbitTopology(SyncRabbit):
    """Admin access (aio-pika on a loop of its own, not the driver) and fresh queues."""

    driver_type: ClassVar[str] = "rabbitmq"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.dead = self.name("dead")
        self.admin.exchanges.append(self.dead)  # the driver declares it; close deletes it

    def queue(self, suffix: str, lease_s: float = 2.0) -> str:
        name = self.name(suffix)
        self.run(self.admin.declare(name))
        return name

    def publish(self, queue: str, body: bytes, headers: Mapping[str, Any] | None = None,
                **properties: Any) -> None:
        super().publish(queue, body, dict(headers) if headers else None, **properties)

    def dead_letters(self) -> list[DeadLetter]:
        letters = []
        for got in self.drain(self.dead, wait_s=2):
            attributes = {key: _text(value) for key, value in got.headers.items()}
            letters.append(DeadLetter(got.body, attributes, attributes.get(DEAD_LETTER_REASON)))
        return letters

    def driver_options(self) -> dict[str, Any]:
        return {"type": self.driver_type, "url": self.url}

    def dead_letter_config(self) -> dict[str, Any] | None:
        return {"queue": self.dead}
