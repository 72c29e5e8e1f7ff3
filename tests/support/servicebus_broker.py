"""A minimal, in-memory Azure Service Bus-compatible AMQP 1.0 broker for tests.

No Service Bus emulator can be installed on the test machines (the official one is a
container), so the driver is exercised through the real ``azure-servicebus`` SDK against this
broker, built on python-qpid-proton, listening on 127.0.0.1 without TLS. Point the SDK at it
with ``ServiceBusBroker.connection_string`` (``...;UseDevelopmentEmulator=true``: the SDK then
keeps the port from ``Endpoint=sb://127.0.0.1:PORT`` and connects in plain AMQP).

What the SDK really sends (read from its ``_pyamqp`` source and checked with frame traces):

- SASL ``ANONYMOUS`` (the SDK never uses PLAIN or MSSBCBS over this path), then a
  ``$cbs`` request/response link pair carrying ``put-token`` requests: a SAS token
  ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` for audience ``sb://host/entity``.
  The broker checks the HMAC-SHA256 signature against its key, the expiry, and that the
  audience covers the entity; every entity link needs such a token first, as on Service Bus
  (``amqp:unauthorized-access`` otherwise; ``401`` on a bad token).
- Senders attach to ``amqps://host/<queue or topic>`` and transfer single messages
  (``x-opt-scheduled-enqueue-time`` is honoured). Sending to a topic copies the message into
  every subscription.
- Receivers attach to ``amqps://host/<queue>``, ``<topic>/Subscriptions/<name>`` or either with
  ``/$DeadLetterQueue``, in rcv-settle-mode *second*, and issue credit per receive call
  (drain on close). Each delivery's tag is the lock token (a UUID in ``bytes_le`` order); the
  message carries ``x-opt-enqueued-time``, ``x-opt-sequence-number``, ``x-opt-locked-until``
  and ``x-opt-lock-token`` annotations and ``header.delivery-count`` = earlier failed
  deliveries (0 on the first one; Service Bus puts count-1 on the wire).
- Dispositions are answered settled with the applied outcome, as Service Bus does for
  rcv-settle-mode second: ``accepted`` = complete, ``modified`` (delivery-failed) = abandon
  (delivery count +1), ``modified`` + undeliverable-here = defer (refused, see below),
  ``rejected`` = dead-letter into ``<entity>/$DeadLetterQueue`` with the ``DeadLetterReason``
  and ``DeadLetterErrorDescription`` application properties, ``released`` = returned without
  counting a delivery. Settling a lock that expired or was already settled is answered
  ``rejected`` with ``com.microsoft:message-lock-lost`` (the SDK raises
  ``MessageLockLostError``).
- Lock expiry returns the message with delivery count +1; reaching the entity's
  ``max_delivery_count`` dead-letters it with reason ``MaxDeliveryCountExceeded``.
- ``<entity>/$management`` request/response operations: ``com.microsoft:renew-lock``,
  ``com.microsoft:update-disposition`` (settle by lock token: completed / abandoned /
  suspended), ``com.microsoft:peek-message``, ``com.microsoft:schedule-message`` and
  ``com.microsoft:cancel-scheduled-message``. Anything else answers ``501``.

Not implemented (each is refused loudly rather than faked): sessions, deferral
(``receive-by-sequence-number``), transactions, batched sends (message format
``0x80013700``, refused with ``amqp:not-implemented``), message TTL/expiry, duplicate
detection, auto-forwarding, subscription rules/filters (every subscription gets every
message), AAD/JWT tokens (only SAS tokens are accepted), the HTTP management (ATOM) API
and therefore runtime counts through the SDK's administration client, TLS, websockets,
multiple data sections in one body, and ``properties-to-modify`` on abandon. Deviation on
purpose: lock durations below Service Bus's 5 s minimum are allowed, so tests run fast.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from proton import (
    Array,
    Condition,
    Data,
    Delivery,
    Disposition,
    Endpoint,
    Message,
    symbol,
    timestamp,
)
from proton.reactor import ApplicationEvent, Container, EventInjector

from tests.support.servers import free_port

__all__ = ["EntityCounts", "ServiceBusBroker"]

_log = logging.getLogger(__name__)

VENDOR = "com.microsoft"
LOCK_LOST = symbol(f"{VENDOR}:message-lock-lost")
DEAD_LETTER = symbol(f"{VENDOR}:dead-letter")
DLQ_SUFFIX = "/$deadletterqueue"
MGMT_SUFFIX = "/$management"
MAX_MESSAGE_SIZE = 256 * 1024  # Standard tier
BATCH_FORMAT = 0x80013700
TICK_S = 0.02


def _now_ms() -> int:
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


class _Refused(Exception):
    """An AMQP error condition to answer with (link detach, rejected outcome, mgmt status)."""

    def __init__(self, condition: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description
        self.status = status


def _entity_path(address: str | None) -> str:
    """``amqps://host:port/q`` and ``q`` both name ``q``; case-insensitive like Service Bus."""
    if not address:
        return ""
    if "://" in address:
        address = urlparse(address).path
    return address.strip("/").lower()


def make_sas_token(audience: str, key_name: str, key: str, ttl_s: int = 3600) -> str:
    """Build a SAS token the way the SDK does (for unit tests that speak raw AMQP)."""
    from urllib.parse import quote_plus

    expiry = int(time.time()) + ttl_s
    encoded = quote_plus(audience)
    signed = f"{encoded}\n{expiry}".encode()
    sig = base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest()).decode()
    return f"SharedAccessSignature sr={encoded}&sig={quote_plus(sig)}&se={expiry}&skn={key_name}"


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
            return self._entities[_entity_path(path)].counts()

    def entity(self, path: str) -> Entity:
        return self._entities[_entity_path(path)]

    # -- operations shared by AMQP handlers (called with self._lock held) -----------------
    def _targets(self, path: str) -> list[Entity]:
        if path in self._topics:
            return list(self._topics[path].subscriptions.values())
        entity = self._entities.get(path)
        if entity is None:
            raise _Refused(
                "amqp:not-found", f"The messaging entity '{path}' could not be found.", 404
            )
        if path.endswith(DLQ_SUFFIX) or "/subscriptions/" in path:
            raise _Refused("amqp:not-allowed", f"Cannot send to '{path}'.", 400)
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
            stored = Stored(copy, next(self._sequence), _now_ms())
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
        if lock is None or lock.locked_until_ms <= _now_ms():
            raise _Refused(
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
        """Apply one settlement by lock token; raises ``_Refused`` on a lost lock."""
        lock = self._take_lock(entity, token)
        if outcome == "defer":
            raise _Refused(
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
        lock.locked_until_ms = _now_ms() + int(entity.lock_duration_s * 1000)
        return lock.locked_until_ms

    def _housekeep(self) -> None:
        """Expire locks (delivery count +1) and release scheduled messages that are due."""
        now = _now_ms()
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


def _annotated(stored: Stored, lock: Lock | None) -> Message:
    """The message as Service Bus delivers it: broker annotations and delivery count."""
    out = Message()
    out.decode(stored.message.encode())
    annotations = dict(out.annotations or {})
    annotations[symbol("x-opt-enqueued-time")] = timestamp(stored.enqueued_ms)
    annotations[symbol("x-opt-sequence-number")] = stored.sequence_number
    if lock is not None:
        annotations[symbol("x-opt-locked-until")] = timestamp(lock.locked_until_ms)
        annotations[symbol("x-opt-lock-token")] = lock.token
    if stored.scheduled_ms is not None:
        annotations[symbol("x-opt-scheduled-enqueue-time")] = timestamp(stored.scheduled_ms)
    out.annotations = annotations
    out.delivery_count = stored.failed_deliveries
    out.durable = True
    return out


def _links(connection: Any) -> Iterator[Any]:
    mask = Endpoint.LOCAL_ACTIVE | Endpoint.REMOTE_ACTIVE
    link = connection.link_head(mask)
    while link is not None:
        yield link
        link = link.next(mask)


def _array(kind: int, values: list[Any]) -> Array:
    return Array(Data.NULL, kind, *values)


def _as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


class _Handler:
    """Proton event handler: links, transfers, dispositions, timers. Runs in the reactor."""

    def __init__(self, broker: ServiceBusBroker) -> None:
        self.b = broker
        self.tags = itertools.count()
        # per-connection set of (audience path, expiry) from accepted put-token requests
        self.tokens: dict[Any, list[tuple[str, float]]] = {}
        self.outbox: dict[Any, list[Message]] = {}

    # -- plumbing --------------------------------------------------------------------------
    def on_reactor_init(self, event: Any) -> None:  # pragma: no cover - proton callback
        pass

    def on_timer_task(self, event: Any) -> None:
        self.b._ready.set()
        with self.b._lock:
            self.b._housekeep()
        self._pump_all(None)
        event.container.schedule(TICK_S, self)

    def on_pump(self, event: Any) -> None:
        self._pump_all(None)

    def on_stop(self, event: Any) -> None:
        self.b._container.stop()

    def on_connection_bound(self, event: Any) -> None:
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        event.transport.idle_timeout = 0

    def on_connection_remote_open(self, event: Any) -> None:
        conn = event.connection
        if conn.state & Endpoint.LOCAL_UNINIT:
            conn.container = "servicebus-test-broker"
            conn.open()

    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()

    def on_session_remote_close(self, event: Any) -> None:
        event.session.close()

    def on_connection_remote_close(self, event: Any) -> None:
        event.connection.close()

    def on_transport_closed(self, event: Any) -> None:
        self.tokens.pop(event.connection, None)

    def on_link_remote_close(self, event: Any) -> None:
        self.outbox.pop(event.link, None)
        event.link.close()

    # -- attach ----------------------------------------------------------------------------
    def on_link_remote_open(self, event: Any) -> None:
        link: Any = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        kind, path = self._classify(link)
        link.kind = kind
        link.path = path
        try:
            with self.b._lock:
                self._authorize(link, kind, path)
        except _Refused as refused:
            link.source.address = None if link.is_sender else link.source.address
            link.target.address = None if link.is_receiver else link.target.address
            link.open()
            link.condition = Condition(refused.condition, refused.description)
            link.close()
            return
        if kind == "consumer":
            link.rcv_settle_mode = link.remote_rcv_settle_mode
            link.snd_settle_mode = link.remote_snd_settle_mode
        if kind == "producer":
            link.max_message_size = MAX_MESSAGE_SIZE
        link.open()
        if link.is_receiver:
            link.flow(100)

    def _classify(self, link: Any) -> tuple[str, str]:
        address = link.remote_source.address if link.is_sender else link.remote_target.address
        path = _entity_path(address)
        if path == "$cbs":
            return ("cbs-out" if link.is_sender else "cbs-in"), path
        if path.endswith(MGMT_SUFFIX):
            entity = path[: -len(MGMT_SUFFIX)]
            return ("mgmt-out" if link.is_sender else "mgmt-in"), entity
        return ("consumer" if link.is_sender else "producer"), path

    def _authorize(self, link: Any, kind: str, path: str) -> None:
        if kind.startswith("cbs"):
            return
        b = self.b
        if kind == "producer":
            b._targets(path)
        elif path not in b._entities:
            raise _Refused("amqp:not-found", f"The messaging entity '{path}' could not be found.")
        elif kind == "consumer" and path in b._topics:
            raise _Refused("amqp:not-allowed", f"Cannot receive from topic '{path}'.")
        granted = self.tokens.get(link.connection, [])
        now = time.time()
        if not any(
            exp > now and (aud == "" or path == aud or path.startswith(aud + "/"))
            for aud, exp in granted
        ):
            raise _Refused(
                "amqp:unauthorized-access",
                f"Unauthorized access. 'Listen' or 'Send' claim(s) are required for '{path}'. "
                "Send a put-token on $cbs first.",
            )

    # -- incoming transfers ----------------------------------------------------------------
    def on_delivery(self, event: Any) -> None:
        delivery: Any = event.delivery
        link: Any = delivery.link
        if link.is_receiver:
            self._incoming(delivery, link)
        else:
            self._disposition(delivery, link, event.container)

    def _incoming(self, delivery: Any, link: Any) -> None:
        if not delivery.readable or delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        kind: str = getattr(link, "kind", "")
        if not link.state & Endpoint.LOCAL_ACTIVE:  # a transfer racing our refusal
            kind = "refused"
        message = Message()
        try:
            if len(data) > MAX_MESSAGE_SIZE:
                raise _Refused("amqp:link:message-size-exceeded", "The message is too large.")
            message.decode(data)
            if kind == "producer":
                with self.b._lock:
                    self.b._accept(link.path, message)
                delivery.update(Delivery.ACCEPTED)
                self.b.wake()
            elif kind == "cbs-in":
                delivery.update(Delivery.ACCEPTED)
                self._reply(link, message, *self._put_token(link, message))
            elif kind == "mgmt-in":
                delivery.update(Delivery.ACCEPTED)
                self._reply(link, message, *self._management(link, message))
            else:
                raise _Refused("amqp:not-allowed", "Unexpected transfer.")
        except _Refused as refused:
            delivery.local.condition = Condition(refused.condition, refused.description)
            delivery.update(Delivery.REJECTED)
        except Exception as exc:  # malformed input: refuse, keep serving
            delivery.local.condition = Condition("amqp:decode-error", str(exc))
            delivery.update(Delivery.REJECTED)
        delivery.settle()
        if link.credit < 50:
            link.flow(100 - link.credit)

    def _put_token(self, link: Any, request: Message) -> tuple[int, str, dict[str, Any], Any, str]:
        props: dict[Any, Any] = dict(request.properties or {})
        token = _as_str(request.body) or ""
        audience = _as_str(props.get("name")) or ""
        codes = ("status-code", "status-description")
        if _as_str(props.get("operation")) != "put-token":
            return 400, "Unsupported operation.", {}, None, "|".join(codes)
        if _as_str(props.get("type")) not in ("jwt", "servicebus.windows.net:sastoken"):
            return 400, "Unknown token type.", {}, None, "|".join(codes)
        try:
            aud_path, expiry = self._verify_sas(token)
        except ValueError as exc:
            return 401, f"InvalidSignature: {exc}", {}, None, "|".join(codes)
        with self.b._lock:
            self.tokens.setdefault(link.connection, []).append((aud_path, expiry))
        _log.debug("put-token for %s accepted", audience)
        return 202, "Accepted", {}, None, "|".join(codes)

    def _verify_sas(self, token: str) -> tuple[str, float]:
        prefix = "SharedAccessSignature "
        if not token.startswith(prefix):
            raise ValueError("not a SharedAccessSignature")
        fields = {
            k: v[0] for k, v in parse_qs(token[len(prefix) :], keep_blank_values=True).items()
        }
        try:
            resource, sig, expiry, key_name = (
                fields["sr"],
                fields["sig"],
                fields["se"],
                fields["skn"],
            )
        except KeyError as exc:
            raise ValueError(f"missing {exc}") from None
        if key_name != self.b.key_name:
            raise ValueError(f"unknown key name {key_name}")
        from urllib.parse import quote_plus

        signed = f"{quote_plus(resource)}\n{expiry}".encode()
        expected = base64.b64encode(
            hmac.new(self.b.key.encode(), signed, hashlib.sha256).digest()
        ).decode()
        if not hmac.compare_digest(expected, sig):
            raise ValueError("signature mismatch")
        if float(expiry) <= time.time():
            raise ValueError("token expired")
        return _entity_path(unquote(resource)), float(expiry)

    def _reply(
        self,
        link: Any,
        request: Message,
        status: int,
        description: str,
        app: dict[str, Any],
        body: Any,
        fields: str = "statusCode|statusDescription",
    ) -> None:
        code_field, text_field = fields.split("|")
        response = Message()
        response.correlation_id = request.id
        response.properties = {code_field: status, text_field: description, **app}  # type: ignore[assignment]
        response.body = body
        reply_to = request.reply_to
        out_kind = "cbs-out" if link.kind == "cbs-in" else "mgmt-out"
        for candidate in _links(link.connection):
            if (
                candidate.session == link.session
                and getattr(candidate, "kind", "") == out_kind
                and (reply_to is None or candidate.remote_target.address == reply_to)
            ):
                self.outbox.setdefault(candidate, []).append(response)
                self._flush(candidate)
                return
        _log.warning("no reply link for %s", reply_to)

    def _flush(self, link: Any) -> None:
        queue = self.outbox.get(link, [])
        while queue and link.credit > 0:
            message = queue.pop(0)
            link.delivery(str(next(self.tags)).encode())
            link.send(message.encode())
            link.advance()

    # -- management ------------------------------------------------------------------------
    def _management(self, link: Any, request: Message) -> tuple[int, str, dict[str, Any], Any]:
        request_props: dict[Any, Any] = dict(request.properties or {})
        op = _as_str(request_props.get("operation"))
        body = request.body if isinstance(request.body, dict) else {}
        body = {_as_str(k): v for k, v in body.items()}
        b = self.b
        path: str = link.path
        try:
            with b._lock:
                entity = b._entities.get(path)
                if entity is None and op != f"{VENDOR}:schedule-message":
                    raise _Refused("amqp:not-found", f"Entity '{path}' not found.", 404)
                if op == f"{VENDOR}:renew-lock":
                    assert entity is not None
                    tokens = list(body.get("lock-tokens") or [])
                    expirations = [timestamp(b._renew(entity, t)) for t in tokens]
                    return 200, "OK", {}, {"expirations": _array(Data.TIMESTAMP, expirations)}
                if op == f"{VENDOR}:update-disposition":
                    assert entity is not None
                    status = _as_str(body.get("disposition-status"))
                    outcome = {
                        "completed": "complete",
                        "abandoned": "abandon",
                        "suspended": "dead-letter",
                        "defered": "defer",
                    }.get(status or "")
                    if outcome is None:
                        raise _Refused("amqp:invalid-field", f"Bad disposition-status {status}.")
                    for token in list(body.get("lock-tokens") or []):
                        b._settle(
                            entity,
                            token,
                            outcome,
                            _as_str(body.get("deadletter-reason")),
                            _as_str(body.get("deadletter-description")),
                        )
                    b.wake()
                    return 200, "OK", {}, {}
                if op == f"{VENDOR}:peek-message":
                    assert entity is not None
                    start = int(body.get("from-sequence-number") or 0)
                    count = int(body.get("message-count") or 1)
                    found = b._peek(entity, start, count)
                    if not found:
                        return 204, "No messages", {}, {}
                    items = [{"message": _annotated(s, None).encode()} for s in found]
                    return 200, "OK", {}, {"messages": items}
                if op == f"{VENDOR}:schedule-message":
                    numbers = []
                    for item in body.get("messages") or []:
                        item = {_as_str(k): v for k, v in item.items()}
                        message = Message()
                        message.decode(bytes(item["message"]))
                        notes: dict[Any, Any] = dict(message.annotations or {})
                        raw = notes.get(symbol("x-opt-scheduled-enqueue-time"))
                        due = int(raw) if raw is not None else _now_ms()
                        numbers += b._accept(path, message, scheduled_ms=due)
                    return 200, "OK", {}, {"sequence-numbers": _array(Data.LONG, numbers)}
                if op == f"{VENDOR}:cancel-scheduled-message":
                    assert entity is not None
                    b._cancel_scheduled(
                        entity, [int(n) for n in body.get("sequence-numbers") or []]
                    )
                    return 200, "OK", {}, {}
                raise _Refused("amqp:not-implemented", f"Operation {op} is not implemented.", 501)
        except _Refused as refused:
            return (
                refused.status,
                refused.description,
                {"errorCondition": symbol(refused.condition)},
                None,
            )

    # -- outgoing deliveries and their dispositions ---------------------------------------
    def on_link_flow(self, event: Any) -> None:
        link: Any = event.link
        if link.is_sender:
            if getattr(link, "kind", "") == "consumer":
                with self.b._lock:
                    self._pump(link)
            else:
                self._flush(link)

    def _consumers(self, container: Any) -> Iterator[Any]:
        for conn in list(self.tokens):
            for link in _links(conn):
                if getattr(link, "kind", "") == "consumer":
                    yield link

    def _pump_all(self, container: Any) -> None:
        with self.b._lock:
            for link in list(self._consumers(container)):
                self._pump(link)

    def _pump(self, link: Any) -> None:
        entity = self.b._entities.get(link.path)
        if entity is None or not link.state & Endpoint.LOCAL_ACTIVE:
            return
        pending: dict[uuid.UUID, Lock] = link.__dict__.setdefault("pending", {})
        while link.credit > 0 and entity.available:
            stored = entity.available.pop(0)
            token = uuid.uuid4()
            deadline = _now_ms() + int(entity.lock_duration_s * 1000)
            delivery = link.delivery(token.bytes_le)
            delivery.lock_token = token  # proton decodes tags as text: keep the UUID here
            lock = Lock(token, stored, deadline, delivery)
            entity.locks[token] = lock
            pending[token] = lock
            link.send(_annotated(stored, lock).encode())
            link.advance()
        if link.drain_mode and link.credit > 0:
            link.drained()

    def _disposition(self, delivery: Any, link: Any, container: Any) -> None:
        kind = getattr(link, "kind", "")
        if kind != "consumer":
            if delivery.settled or delivery.remote_state:
                delivery.settle()
            return
        state = delivery.remote_state
        if not state:
            return
        token: uuid.UUID | None = getattr(delivery, "lock_token", None)
        if token is None:
            return
        entity = self.b._entities[link.path]
        remote = delivery.remote
        outcome, reason, description = "release", None, None
        if state == Disposition.ACCEPTED:
            outcome = "complete"
        elif state == Disposition.MODIFIED:
            outcome = (
                "defer" if remote.undeliverable else ("abandon" if remote.failed else "release")
            )
        elif state == Disposition.REJECTED:
            outcome = "dead-letter"
            condition = remote.condition
            raw_info: Any = (condition.info if condition else None) or {}
            info = {_as_str(k): v for k, v in raw_info.items()}
            reason = _as_str(info.get("DeadLetterReason"))
            description = _as_str(info.get("DeadLetterErrorDescription"))
            if condition is not None and condition.description and description is None:
                description = condition.description
        elif state != Disposition.RELEASED:
            return  # received-state: not an outcome
        link.__dict__.get("pending", {}).pop(token, None)
        try:
            with self.b._lock:
                self.b._settle(entity, token, outcome, reason, description)
            if not delivery.settled:
                delivery.update(state)
                if state == Disposition.MODIFIED:
                    delivery.local.failed = remote.failed
                    delivery.local.undeliverable = remote.undeliverable
        except _Refused as refused:
            if not delivery.settled:
                delivery.local.condition = Condition(refused.condition, refused.description)
                delivery.update(Delivery.REJECTED)
        delivery.settle()
        self._pump_all(container)


@contextlib.contextmanager
def running_broker(**kwargs: Any) -> Iterator[ServiceBusBroker]:
    broker = ServiceBusBroker(**kwargs).start()
    try:
        yield broker
    finally:
        broker.stop()


def main() -> None:  # pragma: no cover - manual use
    """``python -m tests.support.servicebus_broker QUEUE...``: serve queues until Ctrl-C."""
    import sys

    logging.basicConfig(level=logging.INFO)
    with running_broker() as broker:
        for name in sys.argv[1:] or ["tasks"]:
            broker.create_queue(name)
        print(broker.connection_string, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(1)


if __name__ == "__main__":  # pragma: no cover
    main()
