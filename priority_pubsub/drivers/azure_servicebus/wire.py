"""What a Service Bus message carries and how the core reads it: the driver's own application
properties, the system properties daprd puts in the metadata, the lock token, the entity a
queue name stands for, and the SDK's errors as the project's.

Shared by the consumer (``driver``) and the monitor's abilities (``monitoring``), so neither
imports the other.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import email.utils
import functools
import uuid
from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost, MessageTooLarge
from priority_pubsub.core.message import Lease, now_ms
from priority_pubsub.drivers.base import map_errors

__all__ = [
    "ATTEMPTS_PROPERTY",
    "DLQ_DISPLAY_SUFFIX",
    "DLQ_SUFFIX",
    "ENQUEUED_PROPERTY",
    "INTERNAL_PROPERTIES",
    "SbLock",
    "Scan",
    "application_properties",
    "map_error",
    "ms",
    "new_receiver",
    "sdk_errors",
    "still_locked",
    "system_properties",
    "text",
]

ATTEMPTS_PROPERTY = "priority-pubsub-attempts"
"""Attempts consumed before a scheduled retry copy was sent (application property)."""
ENQUEUED_PROPERTY = "priority-pubsub-enqueued-ms"
"""The original enqueue time of a scheduled retry copy, epoch ms (application property)."""
INTERNAL_PROPERTIES = {ATTEMPTS_PROPERTY, ENQUEUED_PROPERTY}
"""The driver's own application properties: never shown to the app as attributes."""
DLQ_SUFFIX = "/$deadletterqueue"
DLQ_DISPLAY_SUFFIX = "/$DeadLetterQueue"
"""How a dead-letter queue is named to the user (names are case-insensitive)."""

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
    scan: Scan | None = None
    """For a message ``receive_ids`` took: its receiver of its own, closed when the last
    chosen message is settled."""

    def __post_init__(self) -> None:
        self.lease = Lease(token=self, deadline_ms=self.lease_until_ms)


@dataclass(eq=False)
class Scan:
    """The receiver of one ``receive_ids``: it holds the chosen messages' locks, and the
    unchosen ones it received, until it is closed (which returns those, uncounted)."""

    receiver: Any
    open: int = 0


def ms(value: dt.datetime | None) -> int | None:
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
    found.update({key: text(value) for key, value in texts.items() if value})
    if sdk_message.session_id is not None:
        found["SessionId"] = text(sdk_message.session_id)
    if sdk_message.partition_key is not None:
        found["PartitionKey"] = text(sdk_message.partition_key)
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


def still_locked(sdk_message: Any) -> bool:
    """Whether a stashed message may still be handed to a receive: its lock lasts a moment
    longer (a lapsed one comes back from Service Bus by itself, counted)."""
    return (ms(sdk_message.locked_until_utc) or 0) > now_ms() + 50


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def application_properties(sdk_message: Any) -> dict[str, str]:
    """The message's application properties as text (the SDK may give keys and values as bytes)."""
    return {text(k): text(v) for k, v in (sdk_message.application_properties or {}).items()}


def new_receiver(client: Any, queue: str) -> Any:
    """A peek-lock receiver (no prefetch) on the entity ``queue`` names: a queue,
    ``topic/subscription``, or either with ``/$DeadLetterQueue``."""
    from azure.servicebus import ServiceBusReceiveMode, ServiceBusSubQueue

    name, sub_queue = queue, None
    if name.lower().endswith(DLQ_SUFFIX):
        name, sub_queue = name[: -len(DLQ_SUFFIX)], ServiceBusSubQueue.DEAD_LETTER
    kwargs: dict[str, Any] = {
        "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
        "prefetch_count": 0,
        "sub_queue": sub_queue,
    }
    if "/" in name:
        topic, subscription = name.split("/", 1)
        return client.get_subscription_receiver(topic, subscription, **kwargs)
    return client.get_queue_receiver(name, **kwargs)


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """SDK exception -> the project's error hierarchy (retriable or not, by type).

    A lost lock means a lost lease whatever the call (``settling`` changes nothing here).
    """
    from azure.servicebus import exceptions as sb

    said = f"service bus {action}: {type(exc).__name__}: {exc}"
    if isinstance(exc, sb.MessageLockLostError | sb.MessageAlreadySettled):
        return LeaseLost(said)
    if isinstance(exc, sb.MessageSizeExceededError):
        return MessageTooLarge(said)
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
        return DriverUnavailable(said)
    if isinstance(
        exc,
        sb.MessagingEntityNotFoundError
        | sb.MessagingEntityDisabledError
        | sb.ServiceBusAuthenticationError
        | sb.ServiceBusAuthorizationError,
    ):
        return DriverError(said, retriable=False)
    if isinstance(exc, sb.ServiceBusError):
        return DriverError(said, retriable=bool(getattr(exc, "_retryable", False)))
    return DriverError(said)


sdk_errors = functools.partial(map_errors, map_error)
"""``with sdk_errors(action):`` around an SDK call: its errors come out as ``map_error`` says."""
