"""The Azure Service Bus driver (``azure-servicebus`` aio, peek-lock): consume and settle.

What it does for an operator (delayed retries, leases and ``LockDuration``, dead letters, what
it cannot do) is docs/brokers/azure_servicebus.md. The code follows from three facts of the
broker and its SDK:

- No delayed abandon: a delayed retry on a queue sends a scheduled copy, *then* completes the
  original (a crash in between duplicates, never loses); on a subscription, where a copy
  would reach every subscription, the lock is held and the message abandoned when due.
- A lock lasts the entity's ``LockDuration`` and a renewal extends by that much: a lease longer
  than the lock is kept by a background renewal, one in flight per lock, shared with the lease
  keeper's ``extend`` (two renewals at once make the SDK fail).
- The SDK's handlers are unsafe for concurrent use (two reopenings drop each other's link,
  management requests share one response slot) and to cancel mid-frame: every call on a
  handler runs under that handler's lock (``_call``; the long poll only opens under it), and a
  receive is the kit's parked receive (``drivers.parking``), one SDK call per queue, with a
  stash kept while the lock lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import math
import uuid
from collections.abc import Mapping
from typing import Any

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.core.message import Message, now_ms
from priority_pubsub.drivers.azure_servicebus.monitoring import ServiceBusMonitoring
from priority_pubsub.drivers.azure_servicebus.options import ServiceBusOptions
from priority_pubsub.drivers.azure_servicebus.wire import (
    ATTEMPTS_PROPERTY,
    DLQ_DISPLAY_SUFFIX,
    DLQ_SUFFIX,
    ENQUEUED_PROPERTY,
    INTERNAL_PROPERTIES,
    SbLock,
    Scan,
    application_properties,
    ms,
    new_receiver,
    sdk_errors,
    still_locked,
    system_properties,
    text,
)
from priority_pubsub.drivers.base import (
    DriverContext,
    DriverKit,
    DriverOptions,
    live_token,
)
from priority_pubsub.drivers.parking import Call, ParkedReceive
from priority_pubsub.telemetry.logs import get_logger

__all__ = ["ServiceBusDriver"]

_REASON_CHARS = 4096

log = get_logger(__name__)


class ServiceBusDriver(ServiceBusMonitoring, DriverKit[ServiceBusOptions],
                       name="azure_servicebus", options_model=ServiceBusOptions,
                       releases_count_as_attempts=True):
    """Service Bus queues or subscriptions, one per priority; see the module docstring.

    Releases count as attempts: an abandon raises the delivery count; nothing lowers it."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        super().__init__(options, context)
        options = self.options
        self._client: Any = None
        self._credential: Any = None
        self._receivers: dict[str, Any] = {}
        self._senders: dict[str, Any] = {}
        self._gates: dict[Any, asyncio.Lock] = {}
        """One lock per SDK handler (keyed by the handler): see the module docstring."""
        self._parking: ParkedReceive[Any] = ParkedReceive(
            self._sdk_receive, self._abandon_later, self._patience, keep=still_locked,
            beside=False,
        )
        """The SDK receives, one per queue, and the stash of what a cancelled receive left."""
        self._background: set[asyncio.Task[None]] = set()
        """Abandons of stashed messages nobody took (``close`` waits for them)."""
        self._held: set[SbLock] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._scans: set[Scan] = set()
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        from azure.servicebus.aio import ServiceBusClient

        opts = self.options
        kwargs: dict[str, Any] = {"retry_total": opts.retry_total, "retry_backoff_factor": 0.5}
        if opts.connection_string is not None:
            self._client = ServiceBusClient.from_connection_string(
                opts.connection_string.get_secret_value(), **kwargs
            )
        else:
            from azure.identity.aio import DefaultAzureCredential

            self._credential = DefaultAzureCredential()
            self._client = ServiceBusClient(opts.namespace or "", self._credential, **kwargs)
        try:
            with sdk_errors("start"):
                await asyncio.gather(*(self._open(queue) for queue in self.context.queues))
        except DriverError:
            # Drop this attempt's client and handlers: the sidecar calls start() again while
            # the broker is unreachable, and a closed handler can never be reopened.
            await self._release_clients()
            raise
        self._renewer = asyncio.create_task(self._renew_loop(), name="servicebus-renewer")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        for lock in list(self._held):  # delayed retries held on a subscription go back now
            if lock.abandon_at_ms is not None and not lock.lease.lost:
                with contextlib.suppress(Exception):
                    await self._call(lock.receiver, "abandon_message", lock.message)
        self._held.clear()
        await self._parking.close(self.options.max_wait_s + 5)
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.options.max_wait_s + 5)
        await self._release_clients()

    async def _release_clients(self) -> None:
        handlers = [*self._receivers.values(), *self._senders.values(),
                    *(scan.receiver for scan in self._scans)]
        self._scans.clear()
        self._receivers.clear()
        self._senders.clear()
        self._gates.clear()
        await asyncio.gather(*(h.close() for h in handlers), return_exceptions=True)
        client, self._client = self._client, None
        credential, self._credential = self._credential, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        if credential is not None:
            with contextlib.suppress(Exception):
                await credential.close()

    async def _open(self, queue: str) -> None:
        receiver = self._receiver(queue)
        async with self._gate(receiver):
            await asyncio.wait_for(receiver.__aenter__(), 30)
        # A refused attach can go unnoticed until the first receive; a peek proves the entity
        # exists and the credential may listen (and opens the link that renewals use).
        await asyncio.wait_for(self._call(receiver, "peek_messages", max_message_count=1), 30)

    def _gate(self, handler: Any) -> asyncio.Lock:
        gate = self._gates.get(handler)
        if gate is None:
            gate = self._gates[handler] = asyncio.Lock()
        return gate

    async def _call(self, handler: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """``handler.method(...)`` alone on that handler: the SDK cannot (re)open a handler
        or run management requests concurrently (see the module docstring)."""
        async with self._gate(handler):
            return await getattr(handler, method)(*args, **kwargs)

    @property
    def dead_letter_enabled(self) -> bool:
        return True

    def dead_letter_queue_of(self, queue: str) -> str:
        return queue + DLQ_DISPLAY_SUFFIX

    # -- entities --------------------------------------------------------------------------
    def _receiver(self, queue: str) -> Any:
        receiver = self._receivers.get(queue)
        if receiver is None:
            receiver = self._receivers[queue] = new_receiver(self._client, queue)
        return receiver

    def _sender(self, queue: str) -> Any:
        """Sender for a queue, or for the topic of ``topic/subscription``."""
        entity = queue.split("/", 1)[0]
        sender = self._senders.get(entity)
        if sender is None:
            sender = (
                self._client.get_queue_sender(entity)
                if "/" not in queue
                else (self._client.get_topic_sender(entity))
            )
            self._senders[entity] = sender
        return sender

    # -- receive ---------------------------------------------------------------------------
    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        if max_messages <= 0:
            return []
        got = await self._parking.receive(queue, max_messages, wait_s)
        return [self._convert(queue, m) for m in got]

    async def _sdk_receive(self, queue: str, max_messages: int, wait_s: float) -> list[Any]:
        """One SDK receive (the parked receive's broker call): at most ``max_wait_s``, or
        ``zero_wait_s`` for a receive that must answer at once."""
        sdk_wait = self.options.zero_wait_s if wait_s <= 0 else min(wait_s, self.options.max_wait_s)
        try:
            with sdk_errors(f"receive from {queue}"):
                receiver = self._receiver(queue)
                async with self._gate(receiver):  # (re)open alone; the long poll runs unlocked
                    await receiver.__aenter__()
                result: list[Any] = await receiver.receive_messages(
                    max_message_count=max_messages, max_wait_time=sdk_wait
                )
        except DriverError as exc:
            log.warning("servicebus_receive_failed", queue=queue, error=str(exc.__cause__ or exc))
            raise
        return result

    def _patience(self, call: Call[Any], wait_s: float, own: bool) -> float:
        """The SDK's receive ends by its own wait; 2 s more and the receive gives up on it
        (left running: what it brings is stashed)."""
        return (self.options.zero_wait_s if wait_s <= 0 else wait_s) + 2.0

    def _abandon_later(self, queue: str, sdk_messages: list[Any]) -> None:
        """Hand back received messages no receive took (the parked receive's ``release``: the
        stash at close, a stashed one whose lock is about to lapse), in the background. A
        lock already lapsed needs nothing: Service Bus has taken the message back."""
        receiver = self._receivers.get(queue)
        live = [m for m in sdk_messages if (ms(m.locked_until_utc) or 0) > now_ms()]
        if receiver is None or not live:
            return
        task = asyncio.ensure_future(self._abandon_all(receiver, live))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abandon_all(self, receiver: Any, sdk_messages: list[Any]) -> None:
        for sdk_message in sdk_messages:
            with contextlib.suppress(Exception):
                await self._call(receiver, "abandon_message", sdk_message)

    def _convert(self, queue: str, sdk_message: Any, scan: Scan | None = None) -> Message:
        props = application_properties(sdk_message)
        carried = int(props.get(ATTEMPTS_PROPERTY, "0") or 0)
        enqueued = props.get(ENQUEUED_PROPERTY)
        locked_until = ms(sdk_message.locked_until_utc) or now_ms()
        lease_ms = now_ms() + int(self.context.lease_duration_s * 1000)
        receiver = self._receiver(queue) if scan is None else scan.receiver
        lock = SbLock(sdk_message, receiver, queue, max(lease_ms, locked_until), scan=scan)
        self._held.add(lock)
        content_type = sdk_message.content_type
        return Message(
            id=str(sdk_message.message_id or sdk_message.sequence_number),
            queue=queue,
            priority=self.context.priority_of(queue),
            body=b"".join(sdk_message.body)
            if not isinstance(sdk_message.body, bytes)
            else sdk_message.body,
            attributes={k: v for k, v in props.items() if k not in INTERNAL_PROPERTIES},
            attempt=carried + (sdk_message.delivery_count or 0) + 1,
            enqueued_ms=int(enqueued) if enqueued else (ms(sdk_message.enqueued_time_utc) or 0),
            lease=lock.lease,
            content_type=text(content_type) if content_type else None,
            broker_properties=system_properties(sdk_message),
        )

    # -- settle ----------------------------------------------------------------------------
    @staticmethod
    def _lock(message: Message, verb: str) -> SbLock:
        # Service Bus checks its own lock (MessageLockLostError): refuse only a lock the
        # broker already declared lost, never by our clock (infinite grace).
        return live_token(message, SbLock, verb, grace_ms=math.inf)

    async def _settle(self, message: Message, action: str, **kwargs: Any) -> None:
        lock = self._lock(message, action)
        self._held.discard(lock)
        try:
            with sdk_errors(f"{action} {message.id}"):
                await self._call(lock.receiver, action, lock.message, **kwargs)
        finally:
            if lock.scan is not None:
                scan, lock.scan = lock.scan, None
                scan.open -= 1
                if scan.open <= 0:
                    await self._close_scan(scan)

    async def ack(self, message: Message) -> None:
        await self._settle(message, "complete_message")

    async def dead_letter(self, message: Message, reason: str) -> None:
        await self._settle(
            message,
            "dead_letter_message",
            reason=reason[:_REASON_CHARS],
            error_description=f"priority-pubsub: {reason}"[:_REASON_CHARS],
        )

    async def retry(self, message: Message, delay_s: float) -> None:
        if delay_s <= 0:
            await self._settle(message, "abandon_message")
            return
        lock = self._lock(message, "retry")
        if "/" in lock.queue.removesuffix(DLQ_SUFFIX) and not lock.queue.lower().endswith(
            DLQ_SUFFIX
        ):
            lock.abandon_at_ms = now_ms() + int(delay_s * 1000)
            lock.lease_until_ms = lock.abandon_at_ms
            self._held.add(lock)
            return
        if lock.queue.lower().endswith(DLQ_SUFFIX):  # cannot send to a DLQ: plain abandon
            await self._settle(message, "abandon_message")
            return
        if (ms(lock.message.locked_until_utc) or 0) <= now_ms():
            raise LeaseLost(f"lock on message {message.id} expired before the retry")
        copy = self._copy(message, lock.message, delay_s)
        with sdk_errors(f"schedule retry copy of {message.id}"):
            await self._call(self._sender(lock.queue), "send_messages", copy)
        await self._settle(message, "complete_message")

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """As ``retry``: Service Bus counts the abandon (``releases_count_as_attempts``)."""
        await self.retry(message, delay_s)

    def _copy(self, message: Message, original: Any, delay_s: float) -> Any:
        from azure.servicebus import ServiceBusMessage

        props: dict[str | bytes, Any] = {
            k: v for k, v in message.attributes.items() if k not in INTERNAL_PROPERTIES
        }
        props[ATTEMPTS_PROPERTY] = str(message.attempt)
        props[ENQUEUED_PROPERTY] = str(message.enqueued_ms)
        return ServiceBusMessage(
            message.body,
            application_properties=props,
            message_id=str(original.message_id) if original.message_id else None,
            content_type=message.content_type,
            correlation_id=original.correlation_id,
            subject=original.subject,
            scheduled_enqueue_time_utc=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=delay_s),
        )

    async def extend(self, message: Message, duration_s: float) -> None:
        lock = self._lock(message, "extend")
        try:
            with sdk_errors(f"renew lock of {message.id}"):
                until = await self._renew(lock)
        except DriverError:
            lock.lease.lost = True
            self._held.discard(lock)
            raise
        lock.lease_until_ms = max(ms(until) or 0, now_ms() + int(duration_s * 1000))
        self._held.add(lock)
        message.lease.deadline_ms = lock.lease_until_ms

    async def _renew(self, lock: SbLock) -> Any:
        """Renew ``lock``, or join the renewal already in flight for it: two renewals of one
        lock at once (lease keeper and background renewal) made the SDK's renew-lock fail."""
        task = lock.renewal
        if task is None or task.done():
            task = lock.renewal = asyncio.create_task(
                self._call(lock.receiver, "renew_message_lock", lock.message)
            )
            # Retrieved here too, so an error nobody awaits (every waiter was cancelled) is
            # not reported as "never retrieved"; the waiters see it through the shield.
            task.add_done_callback(lambda done: done.cancelled() or done.exception())
        # Shielded: a cancelled waiter must not cancel the renewal another waiter shares.
        return await asyncio.shield(task)

    async def _renew_loop(self) -> None:
        """Keep locks alive up to each lease goal; abandon held retries when due."""
        while True:
            await asyncio.sleep(0.2)
            now = now_ms()
            for lock in list(self._held):
                if lock not in self._held:
                    continue
                if lock.abandon_at_ms is not None and lock.abandon_at_ms <= now:
                    self._held.discard(lock)
                    with contextlib.suppress(Exception):
                        await self._call(lock.receiver, "abandon_message", lock.message)
                    continue
                locked_until = ms(lock.message.locked_until_utc) or 0
                if lock.lease_until_ms <= now:
                    self._held.discard(lock)  # lease over: Service Bus takes it back at expiry
                elif locked_until < lock.lease_until_ms and (
                    locked_until - now <= self.options.renew_margin_s * 1000
                ):
                    try:
                        await self._renew(lock)
                    except Exception as exc:
                        lock.lease.lost = True
                        self._held.discard(lock)
                        log.warning("servicebus_renew_failed", error=str(exc))

    # -- optional abilities ----------------------------------------------------------------
    async def publish(self, queue: str, body: bytes, attributes: Mapping[str, str] | None = None,
                      content_type: str | None = None) -> str:
        from azure.servicebus import ServiceBusMessage

        message_id = str(uuid.uuid4())
        props: dict[str | bytes, Any] = {}
        props.update((attributes or {}).items())
        message = ServiceBusMessage(
            body,
            application_properties=props,
            content_type=content_type,
            message_id=message_id,
        )
        with sdk_errors(f"send to {queue}"):
            await self._call(self._sender(queue), "send_messages", message)
        return message_id


    async def ping(self) -> None:
        queue = self.context.queues[0]
        try:
            await self._call(self._receiver(queue), "peek_messages", max_message_count=1)
        except Exception as exc:
            raise DriverUnavailable(f"service bus ping: {type(exc).__name__}: {exc}") from exc
