"""The broker-neutral message every driver produces and the core consumes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


def now_ms() -> int:
    """Wall-clock epoch milliseconds: the unit of the journal and of cross-process deadlines."""
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class Lease:
    """A driver's hold on a message until ``deadline_ms`` (epoch ms).

    ``token`` is the driver's handle (SQS receipt handle, Pub/Sub ack id, Service Bus message,
    local claim token). The lease keeper extends the deadline; a settle after it passed is
    refused by the driver with ``LeaseLost`` rather than attempted blindly.
    """

    token: Any
    deadline_ms: int

    def remaining_s(self, at_ms: int | None = None) -> float:
        return (self.deadline_ms - (now_ms() if at_ms is None else at_ms)) / 1000.0


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
    """Set by a driver that could not read the message as the broker's layout says (e.g. a
    Redis stream entry without ``data``): it is dead-lettered with this reason, never
    delivered, never retried."""
