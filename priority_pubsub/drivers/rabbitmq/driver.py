"""The RabbitMQ driver (aio-pika): consume and settle; the lease is the unacked delivery.

What it does for an operator (layouts, leases and ``consumer_timeout``, delayed retries,
attempts, ``hold_redelivered``, native priorities) is docs/brokers/rabbitmq.md. The code
follows from what RabbitMQ does:

- A channel the broker closes returns only its own messages: each receive gets a channel of
  its own, closed once its deliveries are settled. An idle wait is a consumer with prefetch =
  free slots, cancelled at the first arrival (every delivery arrives before the cancel-ok, so
  none is stranded).
- A requeue goes to the queue's front and hides the attempt: retries, releases, renewals and
  the parking of a redelivered delivery publish a copy first (its attempt in a header,
  ``wire``) and ack after, so an interruption duplicates, never loses.
- RabbitMQ closes a channel holding a delivery past the server's ``consumer_timeout`` (no
  per-queue override in 3.10): a delivery older than half of it is renewed through a hold
  queue private to this driver instance, which dead-letters leftovers back within 60 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from priority_pubsub.core.errors import DriverError, LeaseLost
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DriverContext,
    DriverKit,
    DriverOptions,
    QueueDepth,
    check_options,
    live_token,
    map_errors,
)
from priority_pubsub.drivers.rabbitmq.monitoring import RabbitMQMonitoring
from priority_pubsub.drivers.rabbitmq.options import RENEW_FRACTION, RabbitOptions
from priority_pubsub.drivers.rabbitmq.topology import Declarer, Layout
from priority_pubsub.drivers.rabbitmq.wire import (
    RENEWAL_HEADER,
    copy_of,
    map_error,
    new_message,
    read_delivery,
)
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
STRAY_LIMIT = 20


@dataclass(eq=False)
class _Batch:
    """The channel of one receive; closed when its last delivery is settled."""

    channel: AbstractChannel
    open: int = 0


@dataclass(eq=False)
class _Held:
    """The lease token: one unacked delivery and where it came from."""

    incoming: AbstractIncomingMessage
    batch: _Batch
    physical: str
    delivered_at: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None
    done: bool = False
    lapsed: bool = False


@dataclass(eq=False)
class _Pending:
    abandoned: asyncio.Event = field(default_factory=asyncio.Event)


class RabbitMQDriver(RabbitMQMonitoring, DriverKit[RabbitOptions],
                     name="rabbitmq", options_model=RabbitOptions,
                     releases_count_as_attempts=False):
    """Consumes RabbitMQ queues; see the module docstring for the guarantees.

    Releases do not count as attempts: a release publishes a copy carrying the same attempt
    number, then acks."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        super().__init__(options, context)
        options = self.options
        check_options(options, context)  # load_config did; a driver built directly too
        native = (options.native_queue or context.queues[0]) if options.native_priority else None
        self._layout = Layout(context.queues, options.layout, options.consumer_id, native,
                              options.queue_type, options.durable)
        self._renew_after_s = options.consumer_timeout_s * RENEW_FRACTION
        self._instance = uuid.uuid4().hex[:8]
        self._connection: AbstractConnection | None = None
        self._publisher: AbstractChannel | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._hold_locks: dict[str, asyncio.Lock] = {}
        self._held: set[_Held] = set()
        self._background: set[asyncio.Task[None]] = set()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        await self._link()

    async def close(self) -> None:
        for held in list(self._held):
            if held.timer is not None:
                held.timer.cancel()
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.options.call_timeout_s)
        connection, self._connection, self._publisher = self._connection, None, None
        if connection is not None:  # the broker returns whatever is still in hand
            with contextlib.suppress(Exception):  # a timeout included: a stop must not hang
                await asyncio.wait_for(connection.close(), self.options.call_timeout_s)

    @property
    def dead_letter_enabled(self) -> bool:
        return self.context.dead_letter_queue is not None

    async def _link(self) -> AbstractConnection:
        """The open connection, (re)connecting and declaring the topology when needed."""
        if self._connection is not None and _usable(self._connection):
            return self._connection
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._connection is not None and _usable(self._connection):
                return self._connection
            if self._connection is not None:
                log.warning("rabbitmq connection lost; reconnecting")
                with contextlib.suppress(Exception):
                    await self._connection.close()
            self._connection = None
            self._connection = await self._connect()
            self._publisher = None
            return self._connection

    async def _connect(self) -> AbstractConnection:
        with map_errors(map_error, "connect"):
            connection = await aio_pika.connect(
                self.options.url.get_secret_value(), timeout=self.options.connect_timeout_s,
                client_properties={"connection_name": f"priority-pubsub-{self._instance}"})
        try:
            declarer = Declarer(connection, self._layout)
            await declarer.consumed_queues()
            if self.context.dead_letter_queue is not None:
                await declarer.dead_letter(self.context.dead_letter_queue)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await connection.close()
            if isinstance(exc, DriverError) or not isinstance(exc, Exception):
                raise
            raise map_error(exc, "declare") from exc
        return connection

    # -- consuming -------------------------------------------------------------------------

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        self._check_name(queue)
        if max_messages <= 0:
            return []
        if self._layout.native_queue is not None and queue in self.context.queues[1:]:
            return []  # native mode: everything is read through the first name
        pending = _Pending()
        work = asyncio.ensure_future(self._receive(queue, max_messages, max(0.0, wait_s),
                                                   pending))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            # Whatever the work leases from now on, or already has, goes back to the queue.
            pending.abandoned.set()
            work.add_done_callback(self._return_orphans)
            raise

    async def _receive(self, queue: str, count: int, wait_s: float,
                       pending: _Pending) -> list[Message]:
        connection = await self._link()
        physical = self._layout.physical(queue)
        with map_errors(map_error, f"receive {queue}"):
            channel = await connection.channel(publisher_confirms=False)
            got = await self._get_some(channel, physical, count)
            if not got and wait_s > 0 and not pending.abandoned.is_set():
                got = await self._consume_some(channel, physical, count, wait_s, pending)
        if got and pending.abandoned.is_set():
            await self._hand_back_quietly(got, physical)
        elif self.options.hold_redelivered and queue != self.context.dead_letter_queue:
            # (no app runs a dead letter: a redelivered one is a browse's or a crashed
            # requeue's, and is requeued at once, not held back one lease)
            got = await self._park_redelivered(got, physical)
        if not got or pending.abandoned.is_set():
            with contextlib.suppress(Exception):
                await channel.close()
            return []
        return self._leased(queue, channel, got, physical)

    def _leased(self, queue: str, channel: AbstractChannel,
                got: list[AbstractIncomingMessage], physical: str) -> list[Message]:
        """``got`` as leased messages of one batch: ``channel`` closes once the last is settled."""
        batch = _Batch(channel, open=len(got))
        received_ms = now_ms()
        return [self._message(queue, incoming, batch, physical, received_ms)
                for incoming in got]

    async def _get_some(self, channel: AbstractChannel, physical: str,
                        count: int) -> list[AbstractIncomingMessage]:
        queue = await channel.get_queue(physical, ensure=False)
        got: list[AbstractIncomingMessage] = []
        while len(got) < count:
            incoming = await queue.get(no_ack=False, fail=False,
                                       timeout=self.options.call_timeout_s)
            if incoming is None:
                break
            got.append(incoming)
        return got

    async def _consume_some(self, channel: AbstractChannel, physical: str, count: int,
                            wait_s: float, pending: _Pending) -> list[AbstractIncomingMessage]:
        """Wait for the first arrival with a consumer whose prefetch is ``count``."""
        got: list[AbstractIncomingMessage] = []
        arrived = asyncio.Event()

        async def on_message(incoming: AbstractIncomingMessage) -> None:
            got.append(incoming)
            arrived.set()

        channel.close_callbacks.add(lambda *_: arrived.set())
        await channel.set_qos(prefetch_count=count)
        queue = await channel.get_queue(physical, ensure=False)
        tag = await queue.consume(on_message, no_ack=False)
        waits = [asyncio.ensure_future(arrived.wait()),
                 asyncio.ensure_future(pending.abandoned.wait())]
        try:
            await asyncio.wait(waits, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if channel.is_closed:
            raise ConnectionError("channel closed while waiting (connection lost?)")
        await queue.cancel(tag)
        await asyncio.sleep(0)  # deliveries before the cancel-ok run their callbacks first
        return got

    async def _park_redelivered(self, got: list[AbstractIncomingMessage],
                                physical: str) -> list[AbstractIncomingMessage]:
        """Park what a dead holder left (module docstring); the rest goes to the app."""
        fresh = [incoming for incoming in got if not incoming.redelivered]
        if len(fresh) == len(got):
            return got
        lease_ms = math.ceil(self.context.lease_duration_s * 1000)
        connection = await self._link()
        with map_errors(map_error, f"park redelivered on {physical}"):
            parking = await Declarer(connection, self._layout).delay_queue(physical, lease_ms)
            for incoming in got:
                if incoming.redelivered:
                    attempt = read_delivery(incoming, 0).attempt
                    await self._publish("", parking, copy_of(incoming, attempt=attempt))
                    await incoming.ack()
                    log.info("redelivered message parked for one lease (its holder died)",
                             message_id=incoming.message_id, queue=physical)
        return fresh

    async def _hand_back_quietly(self, got: list[AbstractIncomingMessage],
                                 physical: str) -> None:
        """A cancelled receive's deliveries: copies back to the queue, not requeues (which
        would mark them redelivered, and parked, though nobody saw them)."""
        for incoming in got:
            try:
                await self._publish("", physical, copy_of(
                    incoming, attempt=read_delivery(incoming, 0).attempt))
                await incoming.ack()
            except Exception as exc:  # the channel closes below: the broker requeues it
                log.debug("handing back a cancelled receive failed", error=str(exc))

    def _message(self, queue: str, incoming: AbstractIncomingMessage, batch: _Batch,
                 physical: str, received_ms: int) -> Message:
        reading = read_delivery(incoming, received_ms)
        name = queue
        if self._layout.native_queue is not None:
            name = self._layout.name_for_priority(incoming.priority)
        held = _Held(incoming, batch, physical)
        self._held.add(held)
        lease_s = self.context.lease_duration_s
        held.timer = asyncio.get_running_loop().call_later(lease_s, self._lapse, held)
        return Message(
            id=reading.id, queue=name, priority=self.context.priority_of(name),
            body=incoming.body, attributes=reading.attributes, attempt=reading.attempt,
            enqueued_ms=reading.enqueued_ms,
            lease=Lease(token=held, deadline_ms=received_ms + math.ceil(lease_s * 1000)),
            content_type=incoming.content_type, received_ms=received_ms,
            defect=reading.defect,
        )

    def _return_orphans(self, work: asyncio.Future[list[Message]]) -> None:
        if work.cancelled() or work.exception() is not None:
            return
        for message in work.result():
            self._lapse(message.lease.token)

    def _lapse(self, held: _Held) -> None:
        """The lease ran out unextended: hand the delivery back, refuse later settles."""
        if held.done:
            return
        held.lapsed = True
        self._spawn(self._return_quietly(held))

    async def _return_quietly(self, held: _Held) -> None:
        try:
            if not held.batch.channel.is_closed:  # a copy (counted), not a requeue: see above
                attempt = read_delivery(held.incoming, 0).attempt + 1
                await self._publish("", held.physical, copy_of(held.incoming, attempt=attempt))
                await held.incoming.ack()
        except Exception as exc:  # the channel is gone: the broker returned it already
            log.debug("returning a lapsed delivery failed", error=str(exc))
        finally:
            self._finish(held)

    # -- settling --------------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        held = self._live(message, "ack")
        await self._settle_call("ack", held.incoming.ack())
        self._finish(held)

    async def retry(self, message: Message, delay_s: float) -> None:
        await self._send_back(message, delay_s, attempt=message.attempt + 1, verb="retry")

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """Hand the message back unseen: its next delivery keeps this attempt number."""
        await self._send_back(message, delay_s, attempt=message.attempt, verb="release")

    async def _send_back(self, message: Message, delay_s: float, *, attempt: int,
                         verb: str) -> None:
        held = self._live(message, verb)
        copy = copy_of(held.incoming, attempt=attempt)
        delay_ms = max(0, round(delay_s * 1000))
        target = held.physical
        if delay_ms > 0:
            connection = await self._link()
            declaring = Declarer(connection, self._layout).delay_queue(held.physical, delay_ms)
            target = await self._settle_call("declare delay queue", declaring)
        await self._publish("", target, copy)
        await self._settle_call(verb, held.incoming.ack())
        self._finish(held)

    async def extend(self, message: Message, duration_s: float) -> None:
        held = self._live(message, "extend")
        if time.monotonic() - held.delivered_at >= self._renew_after_s:
            await self._renew(message, held)
        if held.timer is not None:
            held.timer.cancel()
        held.timer = asyncio.get_running_loop().call_later(duration_s, self._lapse, held)
        message.lease.deadline_ms = now_ms() + math.ceil(duration_s * 1000)

    async def dead_letter(self, message: Message, reason: str) -> None:
        held = self._live(message, "dead-letter")
        dead = self.context.dead_letter_queue
        if dead is None:
            raise DriverError("no dead_letter.queue configured", retriable=False)
        copy = copy_of(held.incoming, attempt=message.attempt, extra_headers={
            DEAD_LETTER_REASON: reason, DEAD_LETTER_SOURCE: message.queue})
        await self._publish(dead, "", copy)
        await self._settle_call("dead-letter ack", held.incoming.ack())
        self._finish(held)

    async def _renew(self, message: Message, held: _Held) -> None:
        """Swap the aging delivery for a fresh one of the same message (module docstring)."""
        lock = self._hold_locks.setdefault(held.physical, asyncio.Lock())
        async with lock:
            connection = await self._link()
            expires_ms = round(self.options.consumer_timeout_s * 3000)
            hold = await self._settle_call("declare hold queue", Declarer(
                connection, self._layout).hold_queue(held.physical, self._instance, expires_ms))
            token = uuid.uuid4().hex
            await self._publish("", hold, copy_of(
                held.incoming, attempt=message.attempt + 1, extra_headers={RENEWAL_HEADER: token}))
            await self._settle_call("renew", held.incoming.ack())
            self._leave_batch(held)
            fresh = await self._settle_call("renew", self._take_copy(connection, hold, token))
            if fresh is None:
                held.done = held.lapsed = True
                self._held.discard(held)
                raise LeaseLost(f"renewing {message.id}: its copy left the hold queue; it "
                                "returns to its queue and will be delivered again")
            held.incoming, held.batch = fresh
            held.delivered_at = time.monotonic()
            log.info("delivery renewed before consumer_timeout", message_id=message.id,
                     queue=message.queue)

    async def _take_copy(self, connection: AbstractConnection, hold: str,
                         token: str) -> tuple[AbstractIncomingMessage, _Batch] | None:
        channel = await connection.channel(publisher_confirms=False)
        queue = await channel.get_queue(hold, ensure=False)
        for _ in range(STRAY_LIMIT):
            incoming = await queue.get(no_ack=False, fail=False,
                                       timeout=self.options.call_timeout_s)
            if incoming is None:
                break
            if (incoming.headers or {}).get(RENEWAL_HEADER) == token:
                return incoming, _Batch(channel, open=1)
            # A stray copy (an earlier renewal cut short): straight back to its queue.
            await incoming.reject(requeue=False)
        await channel.close()
        return None

    def _live(self, message: Message, verb: str) -> _Held:
        held = message.lease.token
        if isinstance(held, _Held) and held.done and not held.lapsed:
            raise DriverError(f"{verb} {message.id}: already settled", retriable=False)
        if isinstance(held, _Held) and (held.lapsed or held.batch.channel.is_closed):
            message.lease.lost = True  # our lease timer returned it, or its channel closed
            self._finish(held)
        return live_token(message, _Held, verb)

    def _finish(self, held: _Held) -> None:
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        if not held.done:
            held.done = True
            self._leave_batch(held)
        self._held.discard(held)

    def _leave_batch(self, held: _Held) -> None:
        batch = held.batch
        batch.open -= 1
        if batch.open <= 0 and not batch.channel.is_closed:
            self._spawn(self._close_quietly(batch.channel))

    async def _close_quietly(self, channel: AbstractChannel) -> None:
        with contextlib.suppress(Exception):
            await channel.close()

    async def _settle_call(self, doing: str, call: Any) -> Any:
        with map_errors(map_error, doing, settling=True):
            return await call

    # -- publishing and optional abilities -------------------------------------------------

    async def _publish(self, exchange: str, routing_key: str, message: aio_pika.Message) -> None:
        with map_errors(map_error, f"publish to {exchange or routing_key}"):
            channel = await self._publishing_channel()
            target = (channel.default_exchange if exchange == ""
                      else await channel.get_exchange(exchange, ensure=False))
            await target.publish(message, routing_key=routing_key, mandatory=True,
                                 timeout=self.options.call_timeout_s)

    async def _publishing_channel(self) -> AbstractChannel:
        connection = await self._link()
        if self._publisher is None or self._publisher.is_closed:
            self._publisher = await connection.channel(publisher_confirms=True,
                                                       on_return_raises=True)
        return self._publisher

    async def publish(self, queue: str, body: bytes, attributes: Mapping[str, str] | None = None,
                      content_type: str | None = None) -> str:
        """Publish as a publisher would: to the queue, or to the topic's exchange (Dapr)."""
        message_id = str(uuid.uuid4())
        exchange, routing_key = self._layout.publish_target(queue)
        priority = self._layout.native_priority_of(queue)
        await self._publish(exchange, routing_key,
                            new_message(body, attributes, content_type, message_id, priority,
                                        persistent=self.options.delivery_mode == "persistent"))
        return message_id

    async def depth(self, queue: str) -> QueueDepth:
        """Ready messages (``message_count`` of a passive declare); in flight and delayed are
        not told by AMQP (the management API knows them)."""
        if self._layout.native_queue is not None and queue in self.context.queues[1:]:
            return QueueDepth(visible=None, in_flight=None)
        connection = await self._link()
        with map_errors(map_error, f"depth of {queue}"):
            channel = await connection.channel(publisher_confirms=False)
            try:
                declared = await channel.declare_queue(self._layout.physical(queue),
                                                       passive=True)
            finally:
                await self._close_quietly(channel)
        result = declared.declaration_result
        return QueueDepth(visible=result.message_count, in_flight=None)

    async def ping(self) -> None:
        connection = await self._link()
        with map_errors(map_error, "ping"):
            channel = await asyncio.wait_for(connection.channel(publisher_confirms=False), 5)
            await channel.close()

    # -- plumbing --------------------------------------------------------------------------

    def _check_name(self, queue: str) -> None:
        if queue in self.context.queues or queue == self.context.dead_letter_queue:
            return
        raise DriverError(f"{queue!r} is not a configured queue", retriable=False)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _usable(connection: AbstractConnection) -> bool:
    """aio-pika's plain connection stays "not closed" when the broker drops it; only its
    ``connected`` event tells."""
    return not connection.is_closed and connection.connected.is_set()
