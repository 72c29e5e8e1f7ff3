"""The broker-neutral message every driver produces and the core consumes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.core.errors import LeaseLost


def now_ms() -> int:
    """Wall-clock epoch milliseconds: the unit of the journal and of cross-process deadlines."""
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Lease:
    """A driver's hold on a message until ``deadline_ms`` (epoch ms).

    ``token`` is the driver's handle (SQS receipt handle, Pub/Sub ack id, Service Bus lock,
    local claim token). The lease keeper extends the deadline; a settle after it passed is
    refused with ``LeaseLost`` by ``require_live`` rather than attempted blindly (as asynq's
    ``Lease`` does). ``clock`` is injectable so a test can move time; ``lost`` is set when the
    broker itself said the lease is gone.
    """

    token: Any
    deadline_ms: int
    clock: Callable[[], int] = field(default=now_ms, repr=False, compare=False)
    lost: bool = False

    def remaining_s(self, at_ms: int | None = None) -> float:
        return (self.deadline_ms - (self.clock() if at_ms is None else at_ms)) / 1000.0

    def require_live(self, verb: str, message_id: str, *, grace_ms: float = 0) -> None:
        """Raise ``LeaseLost`` unless this lease still holds for ``verb``.

        ``grace_ms`` lets a call run this long past the deadline: an extension a little late
        may still rescue the lease, an ack must not (it could delete another consumer's
        message). A driver whose broker checks its own lock passes ``math.inf``: only a lease
        the broker already declared lost is refused.
        """
        if self.lost:
            raise LeaseLost(f"{verb} {message_id}: the broker reported its lease lost")
        late_ms = self.clock() - self.deadline_ms
        if late_ms >= grace_ms:
            raise LeaseLost(
                f"{verb} {message_id}: lease lapsed {late_ms} ms ago; the broker may already "
                "have handed it to another consumer"
            )


@dataclass(slots=True)
class Message:
    """One received message, leased to this sidecar.

    ``attempt`` is 1-based and comes from the broker (receive count, delivery attempt,
    delivery count), never from process memory: it must survive a restart of the pod.
    """

    id: str
    queue: str
    priority: int
    body: bytes
    attributes: dict[str, str]
    attempt: int
    enqueued_ms: int
    lease: Lease
    content_type: str | None = None
    received_ms: int = field(default_factory=now_ms)
    defect: str | None = None
    """Why the message cannot be delivered as received (a driver found it malformed: a bad
    header, a missing field, a Redis stream entry without ``data``). The worker dead-letters
    it with this reason, never delivers or retries it."""
    broker_properties: dict[str, str] = field(default_factory=dict)
    """The broker's own properties of the message, named as daprd's component names them
    (Service Bus ``MessageId``, ``DeliveryCount``...). Apart from ``attributes`` (the
    publisher's): a retry copy never turns them into application properties, and only Dapr
    mode sends them (as daprd does, ``metadata.<name>``)."""
    promoted_after_s: float | None = None
    """Set when the starvation bound (``queues[].max_wait_s``) took this message ahead of
    higher queues: how long its queue had gone untried. Journaled as ``promoted_after_s``."""
    slots: int = 1
    """Slots of ``concurrency`` it occupies while it runs: its queue's ``queues[].slots``
    when it was received (so a reload changing them leaves the count of what runs right).
    Journaled as ``slots`` when above 1."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter as an operator sees it: never its body."""

    id: str
    source: str | None
    """The queue it came from (``DEAD_LETTER_SOURCE``), when recorded."""
    reason: str | None
    attempts: int | None
    first_seen_ms: int | None
    """When it was first enqueued (epoch ms), when the broker keeps it."""
    last_seen_ms: int | None
    """When it was dead-lettered (epoch ms), when known."""
