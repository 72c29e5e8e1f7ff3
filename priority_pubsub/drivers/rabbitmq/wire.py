"""RabbitMQ wire details: what a delivery means to the core, what a copy carries, what an
error means for retrying.

* **Attempts.** Classic queues keep no delivery count, so the driver writes one: every copy it
  publishes (retry, release, lease renewal) carries ``x-priority-pubsub-attempt``, the attempt
  number of the copy's next delivery. On top of it a delivery adds RabbitMQ's own count of
  returns since that copy was published: ``x-delivery-count`` on quorum queues, or 1 when a
  classic queue marks the delivery ``redelivered`` (a classic queue cannot tell how often).
* **Attributes** are the AMQP headers (as Dapr's ``pubsub.rabbitmq`` hands them to the app),
  minus the broker's and this driver's own bookkeeping headers, plus Dapr's property names
  (``messageid``, ``correlationid``, ``type``, ``contenttype``) when set.
* **Malformed input** (an attempt header that is not a positive integer, a header that is not
  UTF-8 text or not a scalar) never raises: the message carries a ``defect`` and the worker
  dead-letters it with that reason.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.core.message import now_ms

ATTEMPT_HEADER = "x-priority-pubsub-attempt"
ENQUEUED_HEADER = "x-priority-pubsub-enqueued-ms"
RENEWAL_HEADER = "x-priority-pubsub-renewal"
DELIVERY_COUNT_HEADER = "x-delivery-count"
_BROKER_HEADER_PREFIXES = ("x-death", "x-first-death-", "x-last-death-", DELIVERY_COUNT_HEADER)
_OWN_HEADERS = frozenset({ATTEMPT_HEADER, ENQUEUED_HEADER, RENEWAL_HEADER})
_DAPR_PROPERTIES = (("message_id", "messageid"), ("correlation_id", "correlationid"),
                    ("type", "type"), ("content_type", "contenttype"))


@dataclass(frozen=True, slots=True)
class Reading:
    """What one delivery means to the core."""

    id: str
    attempt: int
    enqueued_ms: int
    attributes: dict[str, str]
    defect: str | None


def read_delivery(incoming: AbstractIncomingMessage, received_ms: int) -> Reading:
    headers: Mapping[str, Any] = incoming.headers or {}
    problems: list[str] = []
    base = _positive_int(headers.get(ATTEMPT_HEADER), ATTEMPT_HEADER, problems) or 1
    if DELIVERY_COUNT_HEADER in headers:
        returns = _count(headers[DELIVERY_COUNT_HEADER], problems)
    else:
        returns = 1 if incoming.redelivered else 0
    enqueued = _positive_int(headers.get(ENQUEUED_HEADER), ENQUEUED_HEADER, problems)
    if enqueued is None and incoming.timestamp is not None:
        enqueued = int(incoming.timestamp.timestamp() * 1000)
    attributes = _attributes(incoming, headers, problems)
    return Reading(
        id=incoming.message_id or _content_id(incoming),
        attempt=base + returns,
        enqueued_ms=enqueued or received_ms,
        attributes=attributes,
        defect="; ".join(problems) or None,
    )


def _positive_int(value: Any, name: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("ascii", "replace")
    try:
        number = int(value)
    except (TypeError, ValueError):
        problems.append(f"header {name} is not an integer: {str(value)[:40]!r}")
        return None
    if number < 1:
        problems.append(f"header {name} must be >= 1, got {number}")
        return None
    return number


def _count(value: Any, problems: list[str]) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    problems.append(f"header {DELIVERY_COUNT_HEADER} is not a count: {str(value)[:40]!r}")
    return 0


def _attributes(incoming: AbstractIncomingMessage, headers: Mapping[str, Any],
                problems: list[str]) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for name, value in headers.items():
        if name in _OWN_HEADERS or name.startswith(_BROKER_HEADER_PREFIXES) or value is None:
            continue
        text = _header_text(value)
        if text is None:
            problems.append(f"header {name!r} is not UTF-8 text or a scalar "
                            f"({type(value).__name__})")
            continue
        attributes[name] = text
    for field, key in _DAPR_PROPERTIES:
        value = getattr(incoming, field)
        if value and key not in attributes:
            attributes[key] = str(value)
    return attributes


def _header_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):  # a byte array, or a long string not UTF-8
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return None


def _content_id(incoming: AbstractIncomingMessage) -> str:
    """Messages published without a message id (Dapr's are) get one derived from their
    content, stable across redeliveries so the journal can follow them."""
    digest = hashlib.sha256(incoming.body)
    if incoming.timestamp is not None:
        digest.update(incoming.timestamp.isoformat().encode())
    return f"sha256-{digest.hexdigest()[:24]}"


def copy_of(incoming: AbstractIncomingMessage, *, attempt: int,
            extra_headers: Mapping[str, str] | None = None) -> aio_pika.Message:
    """A copy to publish instead of the delivery: body, properties and headers kept (not
    ``expiration``, which would restart, nor ``user_id``, which must match our login), the
    attempt number of its next delivery written, the broker's death/count headers dropped."""
    headers: dict[str, Any] = {
        name: value for name, value in (incoming.headers or {}).items()
        if not name.startswith(_BROKER_HEADER_PREFIXES)
    }
    headers[ATTEMPT_HEADER] = attempt
    headers.setdefault(ENQUEUED_HEADER, _enqueued_ms(incoming))
    headers.update(extra_headers or {})
    return aio_pika.Message(
        incoming.body, headers=headers, content_type=incoming.content_type,
        content_encoding=incoming.content_encoding,
        delivery_mode=incoming.delivery_mode or aio_pika.DeliveryMode.PERSISTENT,
        priority=incoming.priority, correlation_id=incoming.correlation_id,
        reply_to=incoming.reply_to, message_id=incoming.message_id,
        timestamp=incoming.timestamp, type=incoming.type, app_id=incoming.app_id,
    )


def _enqueued_ms(incoming: AbstractIncomingMessage) -> int:
    if incoming.timestamp is not None:
        return int(incoming.timestamp.timestamp() * 1000)
    return now_ms()


def new_message(body: bytes, attributes: Mapping[str, str] | None, content_type: str | None,
                message_id: str, priority: int | None = None, *,
                persistent: bool = True) -> aio_pika.Message:
    """A message as ``publish`` sends it: persistent unless told, with an id and its enqueue
    time."""
    published_ms = now_ms()
    return aio_pika.Message(
        body, headers={**(attributes or {}), ENQUEUED_HEADER: published_ms},
        content_type=content_type,
        delivery_mode=(aio_pika.DeliveryMode.PERSISTENT if persistent
                       else aio_pika.DeliveryMode.NOT_PERSISTENT),
        message_id=message_id, priority=priority,
        timestamp=dt.datetime.fromtimestamp(published_ms / 1000, dt.UTC),
    )


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """The one mapping of AMQP client errors to the core's errors: whether retrying can help.

    Refusals (a missing queue or exchange, access refused, inequivalent arguments, a bad
    login, an unroutable publish) are terminal; a lost connection or channel, a timeout or a
    refused connect are ``DriverUnavailable``: the same call can work after a reconnect. A
    settle whose channel is gone is ``LeaseLost``: RabbitMQ requeued the delivery with it.
    """
    detail = f"rabbitmq {action}: {type(exc).__name__}: {exc}"
    terminal = (aiormq.exceptions.ChannelNotFoundEntity, aiormq.exceptions.ChannelAccessRefused,
                aiormq.exceptions.ChannelPreconditionFailed,
                aiormq.exceptions.ProbableAuthenticationError,
                aiormq.exceptions.AuthenticationError, aiormq.exceptions.PublishError)
    if isinstance(exc, terminal):
        return DriverError(detail, retriable=False)
    lost_channel = (aiormq.exceptions.ChannelClosed, aiormq.exceptions.ChannelInvalidStateError,
                    aiormq.exceptions.AMQPConnectionError)
    if settling and isinstance(exc, lost_channel):
        return LeaseLost(f"{detail}; RabbitMQ requeued the delivery with its channel")
    if isinstance(exc, aiormq.exceptions.AMQPError | ConnectionError | OSError | TimeoutError
                  | asyncio.TimeoutError | RuntimeError):
        return DriverUnavailable(detail)
    return DriverError(detail, retriable=False)
