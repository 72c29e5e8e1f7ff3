"""What only the monitor asks of RabbitMQ: list a queue's front without taking anything
(``browse``) and take chosen messages out of it (``receive_ids``).

A mixin of ``RabbitMQDriver`` (the monitor finds these abilities on the driver through the
``DeadLetterBrowser`` and ``IdReceiver`` protocols); consume and settle never use it. Each
call works on a channel of its own, from the driver's connection, and leases what it keeps as
``receive`` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from priority_pubsub.core.message import Message, now_ms
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DeadLetter,
    map_errors,
)
from priority_pubsub.drivers.rabbitmq.options import RabbitOptions
from priority_pubsub.drivers.rabbitmq.topology import Layout
from priority_pubsub.drivers.rabbitmq.wire import ATTEMPT_HEADER, map_error, read_delivery

__all__ = ["CHOOSE_SCAN_LIMIT", "RabbitMQMonitoring"]

CHOOSE_SCAN_LIMIT = 1000
"""How many messages ``receive_ids`` gets at most while looking for the chosen ones (what
``browse`` shows comes from the same front of the queue)."""


class RabbitMQMonitoring:
    """The monitor's abilities, on the driver's connection."""

    if TYPE_CHECKING:  # the driver's parts these methods use
        options: RabbitOptions
        _layout: Layout

        def _check_name(self, queue: str) -> None: ...
        async def _link(self) -> AbstractConnection: ...
        async def _get_some(self, channel: AbstractChannel, physical: str,
                            count: int) -> list[AbstractIncomingMessage]: ...
        async def _close_quietly(self, channel: AbstractChannel) -> None: ...
        def _leased(self, queue: str, channel: AbstractChannel,
                    got: list[AbstractIncomingMessage], physical: str) -> list[Message]: ...

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        """``basic.get`` up to ``limit`` on a channel of its own, then closing it: RabbitMQ
        puts every message back where it was (flagged redelivered; a quorum queue counts a
        delivery). Nothing is acked, so nothing can be lost."""
        self._check_name(queue)
        connection = await self._link()
        with map_errors(map_error, f"browse {queue}"):
            channel = await connection.channel(publisher_confirms=False)
            try:
                got = await self._get_some(channel, self._layout.physical(queue), limit)
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()  # returns every one of them
        now = now_ms()
        letters = []
        for incoming in got:
            reading = read_delivery(incoming, now)
            attempts = (incoming.headers or {}).get(ATTEMPT_HEADER)  # not this get's count
            letters.append(DeadLetter(
                id=reading.id, source=reading.attributes.get(DEAD_LETTER_SOURCE),
                reason=reading.attributes.get(DEAD_LETTER_REASON),
                attempts=attempts if isinstance(attempts, int) else None,
                first_seen_ms=reading.enqueued_ms, last_seen_ms=None))
        return letters

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        """The chosen messages, leased as ``receive`` leases (the unacked delivery): on a
        channel of its own, ``basic.get`` from the front until every id is found (at most
        ``CHOOSE_SCAN_LIMIT``); the others are handed back at once (``basic.nack`` with
        requeue: RabbitMQ puts them back where they were, flagged redelivered, as ``browse``
        does). The chosen ones are then acked or published elsewhere, as after a receive."""
        self._check_name(queue)
        wanted = set(ids)
        if not wanted:
            return []
        connection = await self._link()
        physical = self._layout.physical(queue)
        chosen: list[AbstractIncomingMessage] = []
        with map_errors(map_error, f"receive chosen from {queue}"):
            channel = await connection.channel(publisher_confirms=False)
            try:
                source = await channel.get_queue(physical, ensure=False)
                others: list[AbstractIncomingMessage] = []
                while wanted and len(chosen) + len(others) < CHOOSE_SCAN_LIMIT:
                    incoming = await source.get(no_ack=False, fail=False,
                                                timeout=self.options.call_timeout_s)
                    if incoming is None:
                        break
                    message_id = read_delivery(incoming, 0).id
                    if message_id in wanted:
                        wanted.discard(message_id)
                        chosen.append(incoming)
                    else:
                        others.append(incoming)
                for incoming in others:
                    await incoming.nack(requeue=True)
            except BaseException:
                await self._close_quietly(channel)  # returns every one of them
                raise
        if not chosen:
            await self._close_quietly(channel)
            return []
        return self._leased(queue, channel, chosen, physical)
