"""The Azure Service Bus driver (``azure-servicebus`` aio, peek-lock).

Verbs: receive = ``receive_messages`` in PEEK_LOCK with ``prefetch_count=0`` and
``max_message_count`` = the free worker slots; ack = ``complete_message``; extend =
``renew_message_lock``; dead_letter = ``dead_letter_message(reason, description)`` into the
entity's native ``$DeadLetterQueue`` (so ``dead_letter_enabled`` is always true and
``dead_letter.queue`` is not used). ``attempt`` = Service Bus's delivery count: the SDK reports
the AMQP header's count of *earlier* failed deliveries (0 on the first delivery; Service Bus
puts count-1 on the wire), so ``attempt = delivery_count + 1`` (plus the attempts carried by a
scheduled retry copy, below). ``enqueued_ms`` = ``enqueued_time_utc``. Application properties
become ``Message.attributes`` (as strings), hence ``metadata.*`` headers for the app.

A queue ``name`` is a queue, ``topic/subscription``, or either followed by
``/$DeadLetterQueue`` (to drain dead letters with ``requeue``). Authentication is
``connection_string`` (a secret; ``PRIORITY_PUBSUB_DRIVER__CONNECTION_STRING`` overrides it)
or ``namespace`` with ``DefaultAzureCredential`` (workload identity, managed identity, CLI...).

Retry with a delay. Service Bus has no delayed abandon, so ``retry(delay)`` is:

- delay 0: ``abandon_message`` (delivery count +1, visible at once);
- queues: send a copy scheduled at now+delay (``scheduled_enqueue_time_utc``), carrying the
  attempts so far in the ``priority-pubsub-attempts`` application property and the original
  enqueue time in ``priority-pubsub-enqueued-ms``, *then* complete the original. Copy first:
  a crash or a lost lock in between duplicates the message (it is delivered again with the
  same message id) instead of losing it. The copy keeps body, message id, content type,
  correlation id, subject and application properties;
- subscriptions: a copy sent to the topic would reach every subscription, so the driver keeps
  the lock instead (renewing it) and abandons the message when the delay is over. If the
  sidecar stops first, ``close`` abandons it at once; if it dies, the lock expires and Service
  Bus redelivers it, also counted as an attempt.

Leases. Service Bus locks for the entity's ``LockDuration`` and every renewal extends by that
same duration, whatever the caller asks. When the sidecar's lease (``lease.duration_s``) is
longer than the entity's lock, the driver renews in the background until the lease deadline,
so the core's lease always means what it asked for; keep ``lease.duration_s`` at or below
``LockDuration`` to make that unnecessary (one renewal per keeper tick, no more). A settle
after the lock was lost raises ``LeaseLost`` (the SDK's ``MessageLockLostError``).

Concurrency. The SDK's handlers are not safe for concurrent use from several coroutines: two
calls that find a handler closed both (re)open it, the second drops the link the first is
opening (``'NoneType' object has no attribute 'create_sender_link'``), and concurrent
management requests share one response slot and read the same connection. So every call on a
sender or receiver runs under that handler's ``asyncio.Lock`` (the long-poll receive only
opens under it, so it never holds settles back), and a lock has at most one renewal in flight:
the lease keeper's ``extend`` and the background renewal share it instead of renewing twice.

Receiving and cancellation. One SDK receive runs per queue at a time, in a task the caller
awaits but never cancels (cancelling the SDK mid-frame is unsafe): a cancelled or timed-out
caller leaves it running, and what it brings back waits in a per-queue stash that the next
``receive`` of that queue returns first (messages whose lock lapsed there come back from
Service Bus with their delivery count raised; nothing is lost). That is the kit's parked
receive (``drivers.parking``) with one call per queue and a stash kept while the lock lasts;
``close`` abandons what the stash still holds. ``wait_s == 0`` uses a short
receive (``zero_wait_s``, 0.1 s by default): the SDK has no non-blocking receive, and a message
that arrives after the call returned is released back by the SDK, not counted.

The monitor lists dead letters with ``browse``: ``peek_messages`` on a queue's
``$DeadLetterQueue`` (``dead_letter_queue_of``) from sequence number 1, so nothing is locked;
it takes chosen ones with ``receive_ids`` (a receiver of their own, see there).

Not provided: queue depth (the runtime counts live in Service Bus's HTTP management API,
which needs Manage rights the sidecar should not hold), sessions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import email.utils
import functools
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field, SecretStr, model_validator

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost, MessageTooLarge
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    DeadLetter,
    DriverContext,
    DriverOptions,
    live_token,
    map_errors,
    own_options,
)
from priority_pubsub.drivers.parking import Call, ParkedReceive
from priority_pubsub.telemetry.logs import get_logger

__all__ = ["ATTEMPTS_PROPERTY", "ENQUEUED_PROPERTY", "ServiceBusDriver", "ServiceBusOptions"]

ATTEMPTS_PROPERTY = "priority-pubsub-attempts"
"""Attempts consumed before a scheduled retry copy was sent (application property)."""
ENQUEUED_PROPERTY = "priority-pubsub-enqueued-ms"
"""The original enqueue time of a scheduled retry copy, epoch ms (application property)."""
_INTERNAL = {ATTEMPTS_PROPERTY, ENQUEUED_PROPERTY}
DLQ_SUFFIX = "/$deadletterqueue"
DLQ_DISPLAY_SUFFIX = "/$DeadLetterQueue"
"""How a dead-letter queue is named to the user (names are case-insensitive)."""
PEEK_CHUNK = 100
"""Messages asked of one peek or receive (Service Bus may answer fewer; ``browse`` and
``receive_ids`` ask again)."""
CHOOSE_SCAN_LIMIT = 1000
"""How many messages ``receive_ids`` receives at most while looking for the chosen ones."""
CHOOSE_WAIT_S = 1.0
"""How long one of ``receive_ids``'s receives waits for more (an empty answer ends it)."""
_REASON_CHARS = 4096

log = get_logger(__name__)


class ServiceBusOptions(DriverOptions):
    """The ``driver:`` keys for ``type: azure_servicebus``."""

    connection_string: SecretStr | None = None
    namespace: str | None = None
    """Fully qualified namespace, e.g. ``myns.servicebus.windows.net`` (DefaultAzureCredential)."""
    zero_wait_s: float = Field(default=0.1, gt=0, le=5)
    """The receive time used for ``wait_s == 0`` (the SDK cannot poll without waiting)."""
    max_wait_s: float = Field(default=20.0, gt=0, le=300)
    """The longest single SDK receive."""
    retry_total: int = Field(default=3, ge=0, le=10)
    """The SDK's own retries per operation before the driver reports the error."""
    renew_margin_s: float = Field(default=1.0, gt=0)
    """Background renewals (lease longer than the lock) happen this long before the lock ends."""

    @model_validator(mode="after")
    def _one_credential(self) -> ServiceBusOptions:
        if (self.connection_string is None) == (self.namespace is None):
            raise ValueError("set exactly one of driver.connection_string or driver.namespace")
        return self


@dataclass(eq=False)
class SbLock:
    """The lease token: the SDK message, the receiver holding it, and the lease goal."""

    message: Any
    receiver: Any
    queue: str
    lease_until_ms: int
    abandon_at_ms: int | None = None
    """For a delayed retry held on a subscription: abandon when this time comes."""
    lease: Lease = field(init=False)
    """The core's lease on this lock; ``lease.lost`` once Service Bus refused a renewal."""
    renewal: asyncio.Task[Any] | None = field(default=None, init=False)
    """The renewal in flight, shared by every caller that wants one meanwhile."""
    scan: _Scan | None = None
    """For a message ``receive_ids`` took: its receiver of its own, closed when the last
    chosen message is settled."""

    def __post_init__(self) -> None:
        self.lease = Lease(token=self, deadline_ms=self.lease_until_ms)


@dataclass(eq=False)
class _Scan:
    """The receiver of one ``receive_ids``: it holds the chosen messages' locks, and the
    unchosen ones it received, until it is closed (which returns those, uncounted)."""

    receiver: Any
    open: int = 0


def _ms(value: dt.datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def system_properties(sdk_message: Any) -> dict[str, str]:
    """The message's system properties as daprd's Service Bus component puts them in the
    metadata (components-contrib ``common/component/azure/servicebus/message_pubsub.go``
    ``addMessageAttributesToMetadata``, key names from ``message.go``): strings set only when
    non-empty (``SessionId`` whenever present), times in HTTP date format (RFC 1123, GMT),
    ``DeliveryCount`` always and 1-based as Go's SDK counts it, ``LockToken`` as base64 of the
    token's 16 wire bytes."""
    found: dict[str, str] = {"DeliveryCount": str((sdk_message.delivery_count or 0) + 1)}
    texts = {"MessageId": sdk_message.message_id, "CorrelationId": sdk_message.correlation_id,
             "Label": sdk_message.subject, "ReplyTo": sdk_message.reply_to,
             "To": sdk_message.to, "ContentType": sdk_message.content_type}
    found.update({key: _text(value) for key, value in texts.items() if value})
    if sdk_message.session_id is not None:
        found["SessionId"] = _text(sdk_message.session_id)
    if sdk_message.partition_key is not None:
        found["PartitionKey"] = _text(sdk_message.partition_key)
    if sdk_message.sequence_number is not None:
        found["SequenceNumber"] = str(sdk_message.sequence_number)
    times = {"EnqueuedTimeUtc": sdk_message.enqueued_time_utc,
             "ScheduledEnqueueTimeUtc": sdk_message.scheduled_enqueue_time_utc,
             "LockedUntilUtc": sdk_message.locked_until_utc}
    found.update({key: email.utils.format_datetime(value.astimezone(dt.UTC), usegmt=True)
                  for key, value in times.items() if value is not None})
    token = sdk_message.lock_token
    if token:  # the SDK shows the AMQP delivery tag as a UUID read little-endian
        found["LockToken"] = base64.b64encode(uuid.UUID(str(token)).bytes_le).decode("ascii")
    return found


def _still_locked(sdk_message: Any) -> bool:
    """Whether a stashed message may still be handed to a receive: its lock lasts a moment
    longer (a lapsed one comes back from Service Bus by itself, counted)."""
    return (_ms(sdk_message.locked_until_utc) or 0) > now_ms() + 50


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """SDK exception -> the project's error hierarchy (retriable or not, by type).

    A lost lock means a lost lease whatever the call (``settling`` changes nothing here).
    """
    from azure.servicebus import exceptions as sb

    text = f"service bus {action}: {type(exc).__name__}: {exc}"
    if isinstance(exc, sb.MessageLockLostError | sb.MessageAlreadySettled):
        return LeaseLost(text)
    if isinstance(exc, sb.MessageSizeExceededError):
        return MessageTooLarge(text)
    if isinstance(
        exc,
        sb.ServiceBusConnectionError
        | sb.ServiceBusCommunicationError
        | sb.OperationTimeoutError
        | sb.ServiceBusServerBusyError
        | sb.ServiceBusQuotaExceededError
        | asyncio.TimeoutError
        | OSError,
    ):
        return DriverUnavailable(text)
    if isinstance(
        exc,
        sb.MessagingEntityNotFoundError
        | sb.MessagingEntityDisabledError
        | sb.ServiceBusAuthenticationError
        | sb.ServiceBusAuthorizationError,
    ):
        return DriverError(text, retriable=False)
    if isinstance(exc, sb.ServiceBusError):
        return DriverError(text, retriable=bool(getattr(exc, "_retryable", False)))
    return DriverError(text)


_sdk_errors = functools.partial(map_errors, map_error)
"""``with _sdk_errors(action):`` around an SDK call: its errors come out as ``map_error`` says."""


class ServiceBusDriver:
    """Service Bus queues or subscriptions, one per priority; see the module docstring."""

    name: ClassVar[str] = "azure_servicebus"
    options_model: ClassVar[type[DriverOptions]] = ServiceBusOptions
    releases_count_as_attempts: ClassVar[bool] = True
    """An abandon raises the delivery count; nothing lowers it."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        self.options = options = own_options(options, ServiceBusOptions)
        self.context = context
        self._client: Any = None
        self._credential: Any = None
        self._receivers: dict[str, Any] = {}
        self._senders: dict[str, Any] = {}
        self._gates: dict[Any, asyncio.Lock] = {}
        """One lock per SDK handler (keyed by the handler): see "Concurrency" above."""
        self._parking: ParkedReceive[Any] = ParkedReceive(
            self._sdk_receive, self._abandon_later, self._patience, keep=_still_locked,
            beside=False,
        )
        """The SDK receives, one per queue, and the stash (see "Receiving and cancellation")."""
        self._background: set[asyncio.Task[None]] = set()
        """Abandons of stashed messages nobody took (``close`` waits for them)."""
        self._held: set[SbLock] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._scans: set[_Scan] = set()
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
            with _sdk_errors("start"):
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
        or run management requests concurrently (see "Concurrency" above)."""
        async with self._gate(handler):
            return await getattr(handler, method)(*args, **kwargs)

    @property
    def dead_letter_enabled(self) -> bool:
        return True

    def dead_letter_queue_of(self, queue: str) -> str:
        return queue + DLQ_DISPLAY_SUFFIX

    # -- entities --------------------------------------------------------------------------
    def _receiver(self, queue: str) -> Any:
        from azure.servicebus import ServiceBusReceiveMode, ServiceBusSubQueue

        receiver = self._receivers.get(queue)
        if receiver is not None:
            return receiver
        name = queue
        sub_queue = None
        if name.lower().endswith(DLQ_SUFFIX):
            name, sub_queue = name[: -len(DLQ_SUFFIX)], ServiceBusSubQueue.DEAD_LETTER
        kwargs: dict[str, Any] = {
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
            "prefetch_count": 0,
            "sub_queue": sub_queue,
        }
        if "/" in name:
            topic, subscription = name.split("/", 1)
            receiver = self._client.get_subscription_receiver(topic, subscription, **kwargs)
        else:
            receiver = self._client.get_queue_receiver(name, **kwargs)
        self._receivers[queue] = receiver
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
            with _sdk_errors(f"receive from {queue}"):
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
        live = [m for m in sdk_messages if (_ms(m.locked_until_utc) or 0) > now_ms()]
        if receiver is None or not live:
            return
        task = asyncio.ensure_future(self._abandon_all(receiver, live))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abandon_all(self, receiver: Any, sdk_messages: list[Any]) -> None:
        for sdk_message in sdk_messages:
            with contextlib.suppress(Exception):
                await self._call(receiver, "abandon_message", sdk_message)

    def _convert(self, queue: str, sdk_message: Any, scan: _Scan | None = None) -> Message:
        props = {_text(k): _text(v) for k, v in (sdk_message.application_properties or {}).items()}
        carried = int(props.get(ATTEMPTS_PROPERTY, "0") or 0)
        enqueued = props.get(ENQUEUED_PROPERTY)
        locked_until = _ms(sdk_message.locked_until_utc) or now_ms()
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
            attributes={k: v for k, v in props.items() if k not in _INTERNAL},
            attempt=carried + (sdk_message.delivery_count or 0) + 1,
            enqueued_ms=int(enqueued) if enqueued else (_ms(sdk_message.enqueued_time_utc) or 0),
            lease=lock.lease,
            content_type=_text(content_type) if content_type else None,
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
            with _sdk_errors(f"{action} {message.id}"):
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
        if (_ms(lock.message.locked_until_utc) or 0) <= now_ms():
            raise LeaseLost(f"lock on message {message.id} expired before the retry")
        copy = self._copy(message, lock.message, delay_s)
        with _sdk_errors(f"schedule retry copy of {message.id}"):
            await self._call(self._sender(lock.queue), "send_messages", copy)
        await self._settle(message, "complete_message")

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """As ``retry``: Service Bus counts the abandon (``releases_count_as_attempts``)."""
        await self.retry(message, delay_s)

    def _copy(self, message: Message, original: Any, delay_s: float) -> Any:
        from azure.servicebus import ServiceBusMessage

        props: dict[str | bytes, Any] = {
            k: v for k, v in message.attributes.items() if k not in _INTERNAL
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
            with _sdk_errors(f"renew lock of {message.id}"):
                until = await self._renew(lock)
        except DriverError:
            lock.lease.lost = True
            self._held.discard(lock)
            raise
        lock.lease_until_ms = max(_ms(until) or 0, now_ms() + int(duration_s * 1000))
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
                locked_until = _ms(lock.message.locked_until_utc) or 0
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
    async def publish(
        self,
        queue: str,
        body: bytes,
        attributes: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> str:
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
        with _sdk_errors(f"send to {queue}"):
            await self._call(self._sender(queue), "send_messages", message)
        return message_id

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        """``peek_messages`` from the queue's first sequence number on: nothing is locked and
        no delivery is counted. Each call starts again from the front (the SDK would go on
        from where the receiver's last peek stopped)."""
        receiver = self._receiver(queue)
        async with self._gate(receiver):
            with _sdk_errors(f"browse {queue}"):
                await asyncio.wait_for(receiver.__aenter__(), 30)
        source = queue[: -len(DLQ_SUFFIX)] if queue.lower().endswith(DLQ_SUFFIX) else None
        letters: list[DeadLetter] = []
        next_sequence = 1
        while len(letters) < limit:
            with _sdk_errors(f"browse {queue}"):
                peeked = await self._call(receiver, "peek_messages",
                                          max_message_count=min(PEEK_CHUNK, limit - len(letters)),
                                          sequence_number=next_sequence)
            if not peeked:
                break
            for sdk_message in peeked:
                props = {_text(k): _text(v)
                         for k, v in (sdk_message.application_properties or {}).items()}
                enqueued = props.get(ENQUEUED_PROPERTY)
                letters.append(DeadLetter(
                    id=str(sdk_message.message_id or sdk_message.sequence_number),
                    source=source, reason=sdk_message.dead_letter_reason, attempts=None,
                    first_seen_ms=int(enqueued) if enqueued else _ms(
                        sdk_message.enqueued_time_utc),
                    last_seen_ms=None))
            next_sequence = max(m.sequence_number for m in peeked) + 1
        return letters[:limit]

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        """The chosen messages, locked as ``receive`` locks them, on a receiver of their own:
        it receives (peek-lock) from the front until every id is found (at most
        ``CHOOSE_SCAN_LIMIT``) and is closed once the chosen ones are settled, which hands
        the others back uncounted (closing at once when none was chosen). Service Bus's own
        way, receive by sequence number, needs each message deferred first: not used."""
        from azure.servicebus import ServiceBusReceiveMode, ServiceBusSubQueue

        wanted = set(ids)
        if not wanted:
            return []
        name, sub_queue = queue, None
        if name.lower().endswith(DLQ_SUFFIX):
            name, sub_queue = name[: -len(DLQ_SUFFIX)], ServiceBusSubQueue.DEAD_LETTER
        kwargs: dict[str, Any] = {"receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
                                  "prefetch_count": 0, "sub_queue": sub_queue}
        if "/" in name:
            topic, subscription = name.split("/", 1)
            receiver = self._client.get_subscription_receiver(topic, subscription, **kwargs)
        else:
            receiver = self._client.get_queue_receiver(name, **kwargs)
        scan = _Scan(receiver)
        self._scans.add(scan)
        chosen: list[Any] = []
        scanned = 0
        try:
            with _sdk_errors(f"receive chosen from {queue}"):
                await asyncio.wait_for(receiver.__aenter__(), 30)
                while wanted and scanned < CHOOSE_SCAN_LIMIT:
                    batch = await self._call(
                        receiver, "receive_messages", max_wait_time=CHOOSE_WAIT_S,
                        max_message_count=min(PEEK_CHUNK, CHOOSE_SCAN_LIMIT - scanned))
                    if not batch:
                        break
                    scanned += len(batch)
                    for sdk_message in batch:
                        message_id = str(sdk_message.message_id or sdk_message.sequence_number)
                        if message_id in wanted:
                            wanted.discard(message_id)
                            chosen.append(sdk_message)
        except BaseException:
            await self._close_scan(scan)
            raise
        if not chosen:
            await self._close_scan(scan)
            return []
        scan.open = len(chosen)
        return [self._convert(queue, sdk_message, scan) for sdk_message in chosen]

    async def _close_scan(self, scan: _Scan) -> None:
        self._scans.discard(scan)
        self._gates.pop(scan.receiver, None)
        try:
            await scan.receiver.close()
        except Exception as exc:  # the broker takes the locks back when they lapse
            log.warning("servicebus closing a receive_ids receiver failed", error=str(exc))

    async def ping(self) -> None:
        queue = self.context.queues[0]
        try:
            await self._call(self._receiver(queue), "peek_messages", max_message_count=1)
        except Exception as exc:
            raise DriverUnavailable(f"service bus ping: {type(exc).__name__}: {exc}") from exc
