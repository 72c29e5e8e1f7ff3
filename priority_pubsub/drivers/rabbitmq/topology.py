"""Where each configured queue lives on RabbitMQ, and the idempotent declarations behind it.

Two layouts:

* ``queues``: each configured name is a RabbitMQ queue (published to through the default
  exchange).
* ``dapr``: each configured name is a Dapr topic, laid out as Dapr's ``pubsub.rabbitmq``
  does: a fanout exchange named after the topic and the queue ``{consumer_id}-{topic}`` bound
  to it, so messages daprd publishes reach the sidecar unchanged. Retries go to the queue
  itself (through the default exchange), never back through the exchange, which would reach
  every other subscriber of the topic too.

With ``native_priority`` every configured name shares one queue declared with
``x-max-priority``; a message's priority property says which configured name it belongs to.

Beside them the driver declares its own helpers: the dead-letter exchange (fanout, named
``dead_letter.queue``) with the queue ``dead_letter.queue`` bound to it; per retry delay a
delay queue (TTL, then dead-lettered back to the source queue); and, for leases older than
half the server's ``consumer_timeout``, a hold queue private to this driver instance (see
``rabbitmq.py``). Declarations are idempotent; an entity that already exists with other
arguments (declared by someone else) is used as it is, with a warning — except a queue that
would delete itself (``auto_delete``), which this driver refuses to consume from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, ExchangeType

from priority_pubsub.core.errors import DriverError
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)

HOLD_TTL_MS = 60_000
"""A lease-renewal copy waits at most this long in a hold queue before it goes back to its
source queue: long enough for the one get that follows its publish."""
DELAY_QUEUE_SPARE_MS = 300_000
"""A delay queue deletes itself this long after its last use (it is declared again before
every publish, which restarts the clock, and its messages leave after the delay)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Names for one driver's configuration."""

    queues: tuple[str, ...]
    kind: str = "queues"
    consumer_id: str | None = None
    native_queue: str | None = None
    queue_type: str = "classic"
    durable: bool = True

    def physical(self, name: str) -> str:
        """The RabbitMQ queue a configured name (or any other queue name) is read from."""
        if self.native_queue is not None and name in self.queues:
            name = self.native_queue
        if self.kind == "dapr" and (name in self.queues or name == self.native_queue):
            return f"{self.consumer_id}-{name}"
        return name

    def publish_target(self, name: str) -> tuple[str, str]:
        """(exchange, routing key) that reaches ``name`` as a publisher would."""
        if self.kind == "dapr" and name not in self.queues and name != self.native_queue:
            return name, ""  # another topic, or the dead-letter exchange
        if self.kind == "dapr":
            topic = self.native_queue if self.native_queue is not None else name
            return topic, ""
        return "", self.physical(name)

    def native_priority_of(self, name: str) -> int | None:
        """AMQP priority for a configured name in native mode (highest for the first)."""
        if self.native_queue is None or name not in self.queues:
            return None
        return len(self.queues) - 1 - self.queues.index(name)

    def name_for_priority(self, priority: int | None) -> str:
        """Native mode: the configured name a delivered priority belongs to."""
        level = max(0, min(len(self.queues) - 1, priority or 0))
        return self.queues[len(self.queues) - 1 - level]

    def consumed(self) -> list[str]:
        """The configured names that have a queue of their own to declare."""
        return [self.native_queue] if self.native_queue is not None else list(self.queues)

    def queue_arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {}
        if self.queue_type == "quorum":
            arguments["x-queue-type"] = "quorum"
        if self.native_queue is not None:
            arguments["x-max-priority"] = len(self.queues) - 1
        return arguments


def delay_queue_name(physical: str, delay_ms: int) -> str:
    return f"{physical}.delay-{delay_ms}ms"


def hold_queue_name(physical: str, instance: str) -> str:
    return f"{physical}.hold-{instance}"


class Declarer:
    """Idempotent declarations on one connection (a fresh channel per attempt, since a
    refused declaration closes its channel)."""

    def __init__(self, connection: AbstractConnection, layout: Layout) -> None:
        self._connection = connection
        self._layout = layout

    async def consumed_queues(self) -> None:
        for name in self._layout.consumed():
            queue = self._layout.physical(name)
            if self._layout.kind == "dapr":
                await self.exchange(name)
            await self.queue(queue, self._layout.queue_arguments())
            if self._layout.kind == "dapr":
                await self._bind(queue, name)

    async def dead_letter(self, name: str) -> None:
        await self.exchange(name)
        await self.queue(name, {})
        await self._bind(name, name)

    async def delay_queue(self, physical: str, delay_ms: int) -> str:
        name = delay_queue_name(physical, delay_ms)
        await self.queue(name, {
            "x-message-ttl": delay_ms, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": physical,
            "x-expires": delay_ms + DELAY_QUEUE_SPARE_MS,
        }, quiet=False)
        return name

    async def hold_queue(self, physical: str, instance: str, expires_ms: int) -> str:
        name = hold_queue_name(physical, instance)
        await self.queue(name, {
            "x-message-ttl": HOLD_TTL_MS, "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": physical, "x-expires": expires_ms,
        }, quiet=False)
        return name

    async def exchange(self, name: str) -> None:
        async with self._channel() as channel:
            try:
                await channel.declare_exchange(name, ExchangeType.FANOUT,
                                               durable=self._layout.durable)
                return
            except aiormq.exceptions.ChannelPreconditionFailed as exc:
                refused = exc
        async with self._channel() as channel:
            await channel.declare_exchange(name, passive=True)
        log.warning("exchange exists with other settings; used as it is",
                    exchange=name, detail=str(refused))

    async def queue(self, name: str, arguments: dict[str, Any], quiet: bool = True) -> None:
        async with self._channel() as channel:
            try:
                await channel.declare_queue(name, durable=self._layout.durable,
                                            arguments=arguments)
                return
            except aiormq.exceptions.ChannelPreconditionFailed as exc:
                refused = exc
        if "auto_delete" in str(refused) or not quiet:
            raise DriverError(
                f"rabbitmq queue {name!r} exists with other settings ({refused}); "
                "an auto-delete queue (Dapr's deletedWhenUnused default) would vanish with its "
                "messages: declare it with deletedWhenUnused: false", retriable=False)
        async with self._channel() as channel:
            await channel.declare_queue(name, passive=True)
        log.warning("queue exists with other arguments; used as it is",
                    queue=name, detail=str(refused))

    async def _bind(self, queue: str, exchange: str) -> None:
        async with self._channel() as channel:
            declared = await channel.get_queue(queue, ensure=False)
            await declared.bind(exchange, routing_key="")

    def _channel(self) -> _ScopedChannel:
        return _ScopedChannel(self._connection)


class _ScopedChannel:
    def __init__(self, connection: AbstractConnection) -> None:
        self._connection = connection
        self._channel: AbstractChannel | None = None

    async def __aenter__(self) -> AbstractChannel:
        self._channel = await self._connection.channel(publisher_confirms=False)
        return self._channel

    async def __aexit__(self, *_: object) -> None:
        if self._channel is not None and not self._channel.is_closed:
            await self._channel.close()

