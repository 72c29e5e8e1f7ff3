"""The driver protocol: the few verbs the core needs from a broker, and nothing else.

A driver only consumes and settles. It never creates queues, topics or policies: that is
``priority_pubsub.provision`` (``priority-pubsub provision``, ``run --provision``). Optional
abilities (depth, publish, ping) are separate runtime-checkable protocols the core probes with
``isinstance``.

Every driver method raises only ``priority_pubsub.errors.DriverError`` subclasses: SDK
exceptions are wrapped at this boundary and marked retriable or terminal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo

from priority_pubsub.errors import ConfigError
from priority_pubsub.message import Lease, Message

__all__ = [
    "DepthReporter",
    "Driver",
    "DriverContext",
    "DriverOptions",
    "Lease",
    "Message",
    "Pinger",
    "Publisher",
    "QueueDepth",
    "StoreProbe",
    "check_options",
    "deployment",
]


class DriverOptions(BaseModel):
    """Base of every driver's own options model (the keys under ``driver:`` besides ``type``).

    ``extra="forbid"``: a misspelt driver key is an error naming ``driver.<key>``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


def deployment(info: ValidationInfo) -> DriverContext | None:
    """The ``DriverContext`` an options model is validated against (``load_config`` passes it
    as validation context), for cross-field checks; None when validated on its own."""
    return info.context if isinstance(info.context, DriverContext) else None


def check_options(options: DriverOptions, context: DriverContext) -> None:
    """Run an options model's cross-field checks against ``context``: ``load_config`` already
    did, a driver built directly (tests, embedding) gets the same one-line ``ConfigError``."""
    from priority_pubsub.config import describe_validation_error

    try:
        type(options).model_validate(options.model_dump(), context=context)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, prefix="driver")) from None


@dataclass(frozen=True, slots=True)
class DriverContext:
    """What the core tells a driver about the deployment, beyond the driver's own options."""

    queues: tuple[str, ...]
    """Queue names, highest priority first: a queue's index is its priority (0 = highest)."""
    dead_letter_queue: str | None = None
    """``dead_letter.queue`` from the config, when set."""
    lease_duration_s: float = 60.0
    """The lease a receive should take; the lease keeper extends it by this much."""

    def priority_of(self, queue: str) -> int:
        """0 for the first configured queue; queues outside the list (a DLQ) rank last."""
        try:
            return self.queues.index(queue)
        except ValueError:
            return len(self.queues)


@runtime_checkable
class Driver(Protocol):
    """The core protocol. ``attempt`` on every message comes from the broker."""

    name: ClassVar[str]
    options_model: ClassVar[type[DriverOptions]]

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

    async def extend(self, message: Message, duration_s: float) -> None:
        """Push the lease deadline to now + ``duration_s`` and update ``message.lease``."""

    async def dead_letter(self, message: Message, reason: str) -> None:
        """Move the message to the dead-letter destination, keeping body and attributes and
        recording ``reason``. Only called when ``dead_letter_enabled``."""

    @property
    def dead_letter_enabled(self) -> bool:
        """True when this driver has a dead-letter destination (configured or native)."""
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
class Publisher(Protocol):
    async def publish(
        self,
        queue: str,
        body: bytes,
        attributes: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> str:
        """Publish one message; return its broker id."""
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


def queue_names(queues: Sequence[Any]) -> tuple[str, ...]:
    """Names from config queue entries, in priority order."""
    return tuple(q.name for q in queues)
