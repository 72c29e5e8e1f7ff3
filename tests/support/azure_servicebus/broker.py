"""The broker's thread-safe facade: entities, sending, settling, lock expiry.

The AMQP side (``amqp.py``) calls the ``_``-prefixed operations with ``_lock`` held.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from proton import Message, symbol
from proton.reactor import ApplicationEvent, Container, EventInjector

from tests.support.azure_servicebus.amqp import _Handler
from tests.support.azure_servicebus.entities import (
    DLQ_SUFFIX,
    LOCK_LOST,
    Entity,
    EntityCounts,
    Lock,
    Refused,
    Stored,
    Topic,
    entity_path,
    now_ms,
)
from tests.support.servers import free_port

_log = logging.getLogger("tests.support.azure_servicebus")


class ServiceBusBroker:
    """Thread-safe facade; the AMQP side runs in a proton reactor thread.

    Entities must be created before clients use them (``create_queue``...), as on Azure:
    links to unknown entities are refused with ``amqp:not-found``.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        key_name: str = "RootManageSharedAccessKey",
        key: str = "dGVzdC1rZXktbm90LWEtc2VjcmV0",
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.key_name = key_name
        self.key = key
        self._lock = threading.RLock()
        self._entities: dict[str, Entity] = {}
        self._topics: dict[str, Topic] = {}
        self._sequence = itertools.count(1)
        self._handler = _Handler(self)
        self._injector = EventInjector()
        self._container = Container(self._handler)
        self._container.selectable(self._injector)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def connection_string(self) -> str:
        return (
            f"Endpoint=sb://{self.host}:{self.port};SharedAccessKeyName={self.key_name};"
            f"SharedAccessKey={self.key};UseDevelopmentEmulator=true"
        )

    def start(self) -> ServiceBusBroker:
        self._container.listen(f"{self.host}:{self.port}")
        self._thread = threading.Thread(target=self._run, name="servicebus-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("broker did not start")
        return self

    def _run(self) -> None:
        self._container.schedule(0, self._handler)  # type: ignore[arg-type]
        try:
            self._container.run()
        except BaseException as exc:  # surfaced to tests through .error
            self.error = exc
            _log.exception("broker loop failed")

    def stop(self) -> None:
        if self._thread is None:
            return
        self._injector.trigger(ApplicationEvent("stop"))
        self._thread.join(10)
        self._injector.close()
        self._thread = None

    def __enter__(self) -> ServiceBusBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wake(self) -> None:
        """Ask the reactor thread to deliver what became available."""
        self._injector.trigger(ApplicationEvent("pump"))

    # -- entities --------------------------------------------------------------------------
    def _new_entity(self, path: str, lock_duration_s: float, max_delivery_count: int) -> Entity:
        key = path.lower()
        dead = Entity(key + DLQ_SUFFIX, lock_duration_s, 2**31 - 1)
        entity = Entity(key, lock_duration_s, max_delivery_count, dead)
        self._entities[key] = entity
        self._entities[dead.path] = dead
        return entity

    def create_queue(
        self, name: str, *, lock_duration_s: float = 60.0, max_delivery_count: int = 10
    ) -> None:
        with self._lock:
            if name.lower() in self._entities or name.lower() in self._topics:
                raise ValueError(f"entity {name} exists")
            self._new_entity(name, lock_duration_s, max_delivery_count)

    def create_topic(self, name: str) -> None:
        with self._lock:
            if name.lower() in self._entities or name.lower() in self._topics:
                raise ValueError(f"entity {name} exists")
            self._topics[name.lower()] = Topic(name.lower())

    def create_subscription(
        self,
        topic: str,
        name: str,
        *,
        lock_duration_s: float = 60.0,
        max_delivery_count: int = 10,
    ) -> None:
        with self._lock:
            owner = self._topics[topic.lower()]
            path = f"{topic}/subscriptions/{name}".lower()
            owner.subscriptions[path] = self._new_entity(path, lock_duration_s, max_delivery_count)

    def counts(self, path: str) -> EntityCounts:
        with self._lock:
            return self._entities[entity_path(path)].counts()

    def entity(self, path: str) -> Entity:
        return self._entities[entity_path(path)]

    # -- operations shared by AMQP handlers (called with self._lock held) -----------------
    def _targets(self, path: str) -> list[Entity]:
        if path in self._topics:
            return list(self._topics[path].subscriptions.values())
        entity = self._entities.get(path)
        if entity is None:
            raise Refused(
                "amqp:not-found", f"The messaging entity '{path}' could not be found.", 404
            )
        if path.endswith(DLQ_SUFFIX) or "/subscriptions/" in path:
            raise Refused("amqp:not-allowed", f"Cannot send to '{path}'.", 400)
        return [entity]

    def _accept(self, path: str, message: Message, scheduled_ms: int | None = None) -> list[int]:
        """Store a sent message in every target entity; return the sequence numbers."""
        annotations = dict(message.annotations or {})
        if scheduled_ms is None:
            raw = annotations.get(symbol("x-opt-scheduled-enqueue-time"))
            scheduled_ms = int(raw) if raw is not None else None
        numbers = []
        for entity in self._targets(path):
            copy = Message()
            copy.decode(message.encode())
            stored = Stored(copy, next(self._sequence), now_ms())
            numbers.append(stored.sequence_number)
            if scheduled_ms is not None and scheduled_ms > stored.enqueued_ms:
                stored.scheduled_ms = scheduled_ms
                entity.scheduled.append(stored)
            else:
                entity.enqueue(stored)
        return numbers

    def _dead_letter(
        self, entity: Entity, stored: Stored, reason: str | None, description: str | None
    ) -> None:
        if entity.dead_letter is None:  # a DLQ has no DLQ: Service Bus keeps it there
            entity.enqueue(stored)
            return
        props = dict(stored.message.properties or {})
        if reason is not None:
            props["DeadLetterReason"] = reason
        if description is not None:
            props["DeadLetterErrorDescription"] = description
        stored.message.properties = props  # type: ignore[assignment]
        stored.sequence_number = next(self._sequence)
        entity.dead_letter.enqueue(stored)

    def _return(self, entity: Entity, stored: Stored, *, failed: bool) -> None:
        if failed:
            stored.failed_deliveries += 1
        if stored.failed_deliveries >= entity.max_delivery_count:
            self._dead_letter(
                entity,
                stored,
                "MaxDeliveryCountExceeded",
                f"Message could not be consumed after {entity.max_delivery_count} attempts.",
            )
        else:
            entity.enqueue(stored)

    def _take_lock(self, entity: Entity, token: uuid.UUID) -> Lock:
        lock = entity.locks.get(token)
        if lock is None or lock.locked_until_ms <= now_ms():
            raise Refused(
                str(LOCK_LOST),
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue.",
                410,
            )
        return lock

    def _settle(
        self,
        entity: Entity,
        token: uuid.UUID,
        outcome: str,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        """Apply one settlement by lock token; raises ``Refused`` on a lost lock."""
        lock = self._take_lock(entity, token)
        if outcome == "defer":
            raise Refused(
                "amqp:not-implemented", "Deferral is not implemented by this broker.", 501
            )
        del entity.locks[token]
        if outcome == "complete":
            return
        if outcome == "abandon":
            self._return(entity, lock.stored, failed=True)
        elif outcome == "release":
            self._return(entity, lock.stored, failed=False)
        elif outcome == "dead-letter":
            self._dead_letter(entity, lock.stored, reason, description)
        else:  # pragma: no cover - callers map outcomes
            raise AssertionError(outcome)

    def _renew(self, entity: Entity, token: uuid.UUID) -> int:
        lock = self._take_lock(entity, token)
        lock.locked_until_ms = now_ms() + int(entity.lock_duration_s * 1000)
        return lock.locked_until_ms

    def _housekeep(self) -> None:
        """Expire locks (delivery count +1) and release scheduled messages that are due."""
        now = now_ms()
        for entity in self._entities.values():
            for token, lock in list(entity.locks.items()):
                if lock.locked_until_ms <= now:
                    del entity.locks[token]
                    self._return(entity, lock.stored, failed=True)
            due = [s for s in entity.scheduled if (s.scheduled_ms or 0) <= now]
            for stored in due:
                entity.scheduled.remove(stored)
                stored.scheduled_ms = None
                entity.enqueue(stored)

    def _peek(self, entity: Entity, from_sequence: int, count: int) -> list[Stored]:
        pool = entity.available + [lk.stored for lk in entity.locks.values()] + entity.scheduled
        pool = sorted((s for s in pool if s.sequence_number >= from_sequence), key=_seq)
        return pool[:count]

    def _cancel_scheduled(self, entity: Entity, numbers: list[int]) -> None:
        entity.scheduled = [s for s in entity.scheduled if s.sequence_number not in numbers]


def _seq(stored: Stored) -> int:
    return stored.sequence_number



@contextlib.contextmanager
def running_broker(**kwargs: Any) -> Iterator[ServiceBusBroker]:
    broker = ServiceBusBroker(**kwargs).start()
    try:
        yield broker
    finally:
        broker.stop()

