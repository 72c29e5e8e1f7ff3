"""Moving one message to another queue: a dead letter back (the CLI's ``requeue`` and the
monitor's), and a waiting message up to a higher queue (the monitor's promote).

Publish to the target first, then ack the original: an interruption between the two leaves
the message in both queues, never in neither. A promote first takes the waiting message by
id (``receive_ids``: leased, so no worker takes it meanwhile); where a read by id leases
nothing (Redis streams), the driver moves it in one step itself (``WaitingMover``), so a
worker taking it meanwhile can never leave it in both.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.core.message import Message
from priority_pubsub.drivers.base import (
    DEAD_LETTER_ATTRIBUTES,
    PROMOTED_FROM,
    REQUEUED_FROM,
    DeadLetterBrowser,
    Driver,
    IdReceiver,
    NotAddressable,
    Publisher,
    WaitingMover,
)

NOT_WAITING = ("not waiting: a worker took it meanwhile, or it is gone (or, on a broker that "
               "scans, beyond the first messages waiting)")


class CannotPromote(Exception):
    """Why one waiting message cannot be promoted (the monitor answers 409 with it)."""


async def requeue_one(driver: Driver, message: Message, from_queue: str,
                      to_queue: str) -> None:
    """Publish one received dead letter to ``to_queue`` without its dead-letter attributes
    (with ``requeued_from``), then ack it from ``from_queue``."""
    await _move_one(driver, message, to_queue, {REQUEUED_FROM: from_queue},
                    dropped=DEAD_LETTER_ATTRIBUTES)


def why_not_promotable(driver: Driver) -> str | None:
    """Why this broker cannot promote a waiting message at all (None: it can, maybe not every
    one): it must list a queue without receiving from it and take one message by id."""
    if not isinstance(driver, DeadLetterBrowser) or not (
            isinstance(driver, WaitingMover)
            or (isinstance(driver, IdReceiver) and isinstance(driver, Publisher))):
        return (f"the {driver.name} driver cannot address one waiting message (a receive "
                "takes the next ones, leases them and counts an attempt)")
    return None


async def promote_one(driver: Driver, queue: str, message_id: str, to_queue: str) -> str:
    """Move waiting ``message_id`` of ``queue`` to ``to_queue`` (with ``promoted_from``):
    its id there. Raises ``CannotPromote`` when it is not waiting (a worker took it) or the
    broker cannot address it."""
    why = why_not_promotable(driver)
    if why is not None:
        raise CannotPromote(why)
    attributes = {PROMOTED_FROM: queue}
    try:
        if isinstance(driver, WaitingMover):
            moved = await driver.move_waiting(queue, message_id, to_queue, attributes)
            if moved is None:
                raise CannotPromote(NOT_WAITING)
            return moved
        assert isinstance(driver, IdReceiver)
        taken = await driver.receive_ids(queue, [message_id])
    except NotAddressable as exc:
        raise CannotPromote(str(exc)) from None
    if not taken:
        raise CannotPromote(NOT_WAITING)
    return await _move_one(driver, taken[0], to_queue, attributes)


async def _move_one(driver: Driver, message: Message, to_queue: str,
                    added: Mapping[str, str], dropped: Collection[str] = ()) -> str:
    """Publish ``message`` to ``to_queue`` with ``added`` attributes (``dropped`` left out),
    then ack it where it was: the step a requeue and a promote share. The copy's id."""
    if not isinstance(driver, Publisher):
        raise ConfigError(f"driver {driver.name} cannot publish")
    attributes = {k: v for k, v in message.attributes.items() if k not in dropped}
    attributes |= added
    copy = await driver.publish(to_queue, message.body, attributes, message.content_type)
    await driver.ack(message)
    return copy
