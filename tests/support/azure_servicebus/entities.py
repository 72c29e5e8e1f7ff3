"""What the test broker stores: entities (queues, subscriptions, dead-letter sub-queues),
messages, locks, and the AMQP error a refused operation answers with."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from proton import Message, symbol

VENDOR = "com.microsoft"
LOCK_LOST = symbol(f"{VENDOR}:message-lock-lost")
DEAD_LETTER = symbol(f"{VENDOR}:dead-letter")
DLQ_SUFFIX = "/$deadletterqueue"
MGMT_SUFFIX = "/$management"
MAX_MESSAGE_SIZE = 256 * 1024  # Standard tier
BATCH_FORMAT = 0x80013700
TICK_S = 0.02


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Stored:
    """One message held by an entity. ``message`` is the client's message, unannotated."""

    message: Message
    sequence_number: int
    enqueued_ms: int
    failed_deliveries: int = 0
    scheduled_ms: int | None = None


@dataclass
class Lock:
    token: uuid.UUID
    stored: Stored
    locked_until_ms: int
    delivery: Any | None


@dataclass
class EntityCounts:
    """Runtime counts of one queue or subscription, for tests (Service Bus reports the same)."""

    active: int
    locked: int
    scheduled: int
    dead_lettered: int


@dataclass
class Entity:
    """A queue, a subscription, or the dead-letter sub-queue of either."""

    path: str
    lock_duration_s: float
    max_delivery_count: int
    dead_letter: Entity | None = None
    available: list[Stored] = field(default_factory=list)
    scheduled: list[Stored] = field(default_factory=list)
    locks: dict[uuid.UUID, Lock] = field(default_factory=dict)

    def enqueue(self, stored: Stored) -> None:
        self.available.append(stored)
        self.available.sort(key=lambda s: s.sequence_number)

    def counts(self) -> EntityCounts:
        dead = (
            len(self.dead_letter.available) + len(self.dead_letter.locks) if self.dead_letter else 0
        )
        return EntityCounts(len(self.available), len(self.locks), len(self.scheduled), dead)


@dataclass
class Topic:
    path: str
    subscriptions: dict[str, Entity] = field(default_factory=dict)


class Refused(Exception):
    """An AMQP error condition to answer with (link detach, rejected outcome, mgmt status)."""

    def __init__(self, condition: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description
        self.status = status


def entity_path(address: str | None) -> str:
    """``amqps://host:port/q`` and ``q`` both name ``q``; case-insensitive like Service Bus."""
    if not address:
        return ""
    if "://" in address:
        address = urlparse(address).path
    return address.strip("/").lower()

