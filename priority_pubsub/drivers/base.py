"""The driver protocol: the few verbs the core needs from a broker, and nothing else.

A driver only consumes and settles. It never creates queues, topics or policies: that is
``priority_pubsub.provision`` (``priority-pubsub provision``, ``run --provision``). Optional
abilities (depth, publish, ping) are separate runtime-checkable protocols the core probes with
``isinstance``.

Every driver method raises only ``priority_pubsub.core.errors.DriverError`` subclasses: SDK
exceptions are wrapped at this boundary and marked retriable or terminal.

The kit every driver uses, so each one only says what is particular to its broker:

* ``Lease.require_live`` (a settle after the lease lapsed is refused with ``LeaseLost``);
* the message attribute names written on dead letters (``DEAD_LETTER_*``, listed in the
  docs/concepts.md: users filter on them, so they never change);
* ``DriverKit``: the base class that names the driver and keeps its options (as its own
  model, ``own_options``) and the deployment context;
* ``own_options``: the one way a driver gets its options model from the core;
* ``map_errors``: the one ``try/except/raise from`` around SDK calls, given the driver's own
  ``map_error(exc, action, settling=...)`` (each driver has exactly one, under that name);
* ``priority_pubsub.core.backoff`` for any retry loop;
* ``drivers.parking.ParkedReceive`` for a broker call a cancelled ``receive`` must not cut
  short (a long poll in a thread, a pull the broker may be answering, an SDK unsafe to
  cancel): it parks the call for the next receive and gives back what nobody took, so the
  driver only says how to start a call and how to release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast, runtime_checkable

from pydantic import ValidationError, ValidationInfo

from priority_pubsub.core.errors import ConfigError, DriverError
from priority_pubsub.core.message import DeadLetter, Lease, Message
from priority_pubsub.settings.config import describe_validation_error
from priority_pubsub.settings.driver import DriverContext, DriverOptions

__all__ = [
    "CONTENT_TYPE_ATTRIBUTE",
    "DEAD_LETTER_ATTRIBUTES",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SOURCE",
    "PROMOTED_FROM",
    "REQUEUED_FROM",
    "DeadLetter",
    "DeadLetterBrowser",
    "DepthReporter",
    "Driver",
    "DriverContext",
    "DriverKit",
    "DriverOptions",
    "ErrorMapper",
    "IdReceiver",
    "Lease",
    "MappedErrors",
    "Message",
    "NotAddressable",
    "OwnDeadLetterQueues",
    "Pinger",
    "Publisher",
    "QueueAdder",
    "QueueDepth",
    "StoreProbe",
    "WaitingMover",
    "check_options",
    "deployment",
    "live_token",
    "map_errors",
    "own_options",
]

DEAD_LETTER_REASON = "dead_letter_reason"
"""Attribute on a dead letter: why it was dead-lettered (Service Bus: its native reason)."""
DEAD_LETTER_SOURCE = "dead_letter_source"
"""Attribute on a dead letter: the queue it came from."""
DEAD_LETTER_ATTRIBUTES = (DEAD_LETTER_REASON, DEAD_LETTER_SOURCE)
REQUEUED_FROM = "requeued_from"
"""Attribute ``requeue`` puts on a message it moved back: the dead-letter queue it left."""
PROMOTED_FROM = "promoted_from"
"""Attribute a promote puts on the waiting message it moved to a higher queue: the queue it
left (the monitor's promote)."""
CONTENT_TYPE_ATTRIBUTE = "content-type"
"""Where ``publish(content_type=...)`` travels on brokers without a content type of their own
(SQS, Pub/Sub); it comes back as ``Message.content_type``, not as an attribute."""

OptionsT = TypeVar("OptionsT", bound="DriverOptions")
T = TypeVar("T")


def own_options(options: DriverOptions, model: type[OptionsT]) -> OptionsT:
    """A driver's options as its own model: the core validates them with ``options_model``
    (``registry.build_driver``); a caller holding another model is re-validated, not trusted."""
    if isinstance(options, model):
        return options
    return model.model_validate(options.model_dump())


class DriverKit(Generic[OptionsT]):
    """The base every driver shares: the class statement names the driver, its options model
    and whether releases count as attempts (``class RedisDriver(DriverKit[RedisOptions],
    name="redis", options_model=RedisOptions, releases_count_as_attempts=False)``), and the
    constructor keeps ``options`` (as that model) and ``context``, so a driver's own
    ``__init__`` starts from them."""

    name: ClassVar[str]
    options_model: ClassVar[type[DriverOptions]]
    releases_count_as_attempts: ClassVar[bool]
    options: OptionsT
    context: DriverContext

    def __init_subclass__(cls, *, name: str | None = None,
                          options_model: type[DriverOptions] | None = None,
                          releases_count_as_attempts: bool | None = None, **rest: Any) -> None:
        super().__init_subclass__(**rest)
        if name is not None:
            cls.name = name
        if options_model is not None:
            cls.options_model = options_model
        if releases_count_as_attempts is not None:
            cls.releases_count_as_attempts = releases_count_as_attempts

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        self.options = cast("OptionsT", own_options(options, self.options_model))
        self.context = context


class ErrorMapper(Protocol):
    """A driver's ``map_error``: an SDK exception raised by ``action`` -> the project error.

    ``settling`` marks calls that carry a lease handle: there a broker's "unknown handle"
    answer means the lease is gone (``LeaseLost``), not a malformed request.
    """

    def __call__(self, exc: Exception, action: str, *, settling: bool = False) -> DriverError:
        ...


def map_errors(
    mapper: ErrorMapper,
    action: str,
    *,
    catch: tuple[type[Exception], ...] = (Exception,),
    settling: bool = False,
) -> MappedErrors:
    """Turn ``catch`` exceptions raised inside the block into ``mapper``'s project errors.

    Works around sync and async code alike (``with map_errors(...): await call``). A
    ``DriverError`` raised inside passes unchanged: it is already the project's.
    """
    return MappedErrors(mapper, action, catch, settling)


class MappedErrors:
    """The context manager ``map_errors`` returns (a class: it is on every settle's path,
    and a generator-based one costs several times more per use)."""

    __slots__ = ("action", "catch", "mapper", "settling")

    def __init__(self, mapper: ErrorMapper, action: str, catch: tuple[type[Exception], ...],
                 settling: bool) -> None:
        self.mapper = mapper
        self.action = action
        self.catch = catch
        self.settling = settling

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if isinstance(exc, self.catch) and not isinstance(exc, DriverError):
            raise self.mapper(exc, self.action, settling=self.settling) from exc


def live_token(message: Message, kind: type[T], verb: str, *, grace_ms: float = 0) -> T:
    """The message's lease token as this driver's ``kind``, if the lease still holds.

    Raises ``DriverError`` for a message another driver received, ``LeaseLost`` (from
    ``Lease.require_live``) for a lease that lapsed or that the broker declared lost.
    """
    token = message.lease.token
    if not isinstance(token, kind):
        raise DriverError(f"{verb}: message {message.id} was not received by this driver")
    message.lease.require_live(verb, message.id, grace_ms=grace_ms)
    return token


def deployment(info: ValidationInfo) -> DriverContext | None:
    """The ``DriverContext`` an options model is validated against (``load_config`` passes it
    as validation context), for cross-field checks; None when validated on its own."""
    return info.context if isinstance(info.context, DriverContext) else None


def check_options(options: DriverOptions, context: DriverContext) -> None:
    """Run an options model's cross-field checks against ``context``: ``load_config`` already
    did, a driver built directly (tests, embedding) gets the same one-line ``ConfigError``."""
    try:
        type(options).model_validate(options.model_dump(), context=context)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, prefix="driver")) from None


@runtime_checkable
class Driver(Protocol):
    """The core protocol. ``attempt`` on every message comes from the broker."""

    name: ClassVar[str]
    options_model: ClassVar[type[DriverOptions]]

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        """The one construction path: ``registry.build_driver`` passes the validated options
        (``own_options`` turns them into the driver's model) and the deployment context."""

    async def start(self) -> None:
        """Connect and resolve queues; raise ``DriverUnavailable`` if the broker is unreachable."""

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        """Lease up to ``max_messages`` from ``queue``.

        ``wait_s == 0`` answers at once. Otherwise wait up to ``wait_s`` for the first message
        and return as soon as any arrive. Cancelling a waiting receive must lose no message:
        anything leased after the cancellation is returned to the queue.
        """
        ...

    async def ack(self, message: Message) -> None:
        """Delete the message for good. Raises ``LeaseLost`` if the lease lapsed."""

    async def retry(self, message: Message, delay_s: float) -> None:
        """Return the message, visible again after ``delay_s`` (0 = at once)."""

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """Hand back a message the app never saw, visible again after ``delay_s``.

        Unlike ``retry`` it does not count as an attempt where the broker lets us avoid it
        (local: the claim's count is undone). Where it cannot
        (``releases_count_as_attempts``), the next delivery reports a higher ``attempt``.
        """

    async def extend(self, message: Message, duration_s: float) -> None:
        """Push the lease deadline to now + ``duration_s`` and update ``message.lease``."""

    async def dead_letter(self, message: Message, reason: str) -> None:
        """Move the message to the dead-letter destination, keeping body and attributes and
        recording ``reason``. Only called when ``dead_letter_enabled``."""

    @property
    def dead_letter_enabled(self) -> bool:
        """True when this driver has a dead-letter destination (configured or native)."""
        ...

    @property
    def releases_count_as_attempts(self) -> bool:
        """True when the broker counts a ``release`` as a delivery (SQS receive count, Pub/Sub
        delivery_attempt, Service Bus delivery_count) and nothing can undo it: the worker
        then never dead-letters a message before delivering it (``settlement.admit``)."""
        ...

    async def close(self) -> None:
        """Release connections; idempotent."""


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """What a broker can tell about one queue; ``None`` means the broker cannot say."""

    visible: int | None
    in_flight: int | None
    oldest_age_s: float | None = None
    delayed: int | None = None


@runtime_checkable
class DepthReporter(Protocol):
    async def depth(self, queue: str) -> QueueDepth: ...


@runtime_checkable
class DeadLetterBrowser(Protocol):
    """A broker that can list a queue without receiving from it (the monitor's dead-letter
    list is then the dead-letter queue itself, not this replica's record)."""

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        """Up to ``limit`` messages waiting in ``queue``, oldest first; none is leased."""
        ...


@runtime_checkable
class OwnDeadLetterQueues(Protocol):
    """A broker that dead-letters each queue into a dead-letter queue of that queue's own
    (Service Bus's ``$DeadLetterQueue``), not into ``dead_letter.queue``."""

    def dead_letter_queue_of(self, queue: str) -> str:
        """The name ``receive``, ``browse`` and ``requeue --from`` take for ``queue``'s
        dead-letter queue."""
        ...


class NotAddressable(DriverError):
    """The broker cannot take that one waiting message by id (the monitor answers 409)."""


@runtime_checkable
class WaitingMover(Protocol):
    """A broker whose read by id leases nothing (Redis streams: ``receive_ids`` reads the
    entry, the group may still take it): it moves one waiting message to another queue
    itself, in one step, so a worker taking it meanwhile can never leave a copy in both."""

    async def move_waiting(self, queue: str, message_id: str, to_queue: str,
                           attributes: Mapping[str, str]) -> str | None:
        """Publish waiting ``message_id`` of ``queue`` to ``to_queue`` with ``attributes``
        added, and delete it from ``queue``, at once: the copy's id, or None when it is not
        waiting any more (taken, gone). Raises ``NotAddressable`` when it cannot."""
        ...


@runtime_checkable
class IdReceiver(Protocol):
    """A broker that can lease chosen messages out of a queue (the monitor's requeue and
    delete of listed dead letters)."""

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        """Lease exactly the messages of ``ids`` still waiting in ``queue`` (others are left
        alone; ids not found are skipped), to be acked or published elsewhere."""
        ...


@runtime_checkable
class Publisher(Protocol):
    async def publish(self, queue: str, body: bytes, attributes: Mapping[str, str] | None = None,
                      content_type: str | None = None) -> str:
        """Publish one message; return its broker id."""
        ...


@runtime_checkable
class QueueAdder(Protocol):
    """A broker whose driver can take a queue not configured at start (a streaming
    subscription's topic unknown at start, docs/dapr/publish-api.md)."""

    async def add_queue(self, queue: str) -> None:
        """Get ready to receive from ``queue``; raise ``DriverError`` (not retriable) when it
        does not exist and the driver does not make it."""
        ...


@runtime_checkable
class Pinger(Protocol):
    async def ping(self) -> None:
        """Raise ``DriverUnavailable`` when the broker cannot be used right now (readiness)."""


@runtime_checkable
class StoreProbe(Protocol):
    def missing_store(self) -> str | None:
        """Why the driver's store does not exist yet (starting would create an empty one),
        or None. Inspecting commands (``stats``, ``requeue``) refuse to create one."""
