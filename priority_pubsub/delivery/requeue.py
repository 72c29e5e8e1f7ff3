"""Moving one dead letter back: the step the CLI's ``requeue`` and the monitor share.

Publish to the target first, then ack from the dead-letter queue: an interruption between
the two leaves the message in both queues, never in neither.
"""

from __future__ import annotations

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.message import Message
from priority_pubsub.drivers.base import DEAD_LETTER_ATTRIBUTES, REQUEUED_FROM, Driver, Publisher


async def requeue_one(driver: Driver, message: Message, from_queue: str,
                      to_queue: str) -> None:
    """Publish one received dead letter to ``to_queue`` without its dead-letter attributes
    (with ``requeued_from``), then ack it from ``from_queue``."""
    if not isinstance(driver, Publisher):
        raise ConfigError(f"driver {driver.name} cannot publish")
    attributes = {k: v for k, v in message.attributes.items()
                  if k not in DEAD_LETTER_ATTRIBUTES}
    attributes[REQUEUED_FROM] = from_queue
    await driver.publish(to_queue, message.body, attributes, message.content_type)
    await driver.ack(message)
