"""The broker's AMQP side: a proton handler for links, transfers, dispositions, the ``$cbs``
token exchange and ``$management`` operations. Runs in the reactor thread."""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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

from tests.support.azure_servicebus.entities import (
    MAX_MESSAGE_SIZE,
    MGMT_SUFFIX,
    TICK_S,
    VENDOR,
    Lock,
    Refused,
    Stored,
    entity_path,
    now_ms,
)
from tests.support.azure_servicebus.sas import verify_sas

if TYPE_CHECKING:
    from tests.support.azure_servicebus.broker import ServiceBusBroker

_log = logging.getLogger("tests.support.azure_servicebus")


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
        except Refused as refused:
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
        path = entity_path(address)
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
            raise Refused("amqp:not-found", f"The messaging entity '{path}' could not be found.")
        elif kind == "consumer" and path in b._topics:
            raise Refused("amqp:not-allowed", f"Cannot receive from topic '{path}'.")
        granted = self.tokens.get(link.connection, [])
        now = time.time()
        if not any(
            exp > now and (aud == "" or path == aud or path.startswith(aud + "/"))
            for aud, exp in granted
        ):
            raise Refused(
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
                raise Refused("amqp:link:message-size-exceeded", "The message is too large.")
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
                raise Refused("amqp:not-allowed", "Unexpected transfer.")
        except Refused as refused:
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
            aud_path, expiry = verify_sas(token, self.b.key_name, self.b.key)
        except ValueError as exc:
            return 401, f"InvalidSignature: {exc}", {}, None, "|".join(codes)
        with self.b._lock:
            self.tokens.setdefault(link.connection, []).append((aud_path, expiry))
        _log.debug("put-token for %s accepted", audience)
        return 202, "Accepted", {}, None, "|".join(codes)


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
                    raise Refused("amqp:not-found", f"Entity '{path}' not found.", 404)
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
                        raise Refused("amqp:invalid-field", f"Bad disposition-status {status}.")
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
                        due = int(raw) if raw is not None else now_ms()
                        numbers += b._accept(path, message, scheduled_ms=due)
                    return 200, "OK", {}, {"sequence-numbers": _array(Data.LONG, numbers)}
                if op == f"{VENDOR}:cancel-scheduled-message":
                    assert entity is not None
                    b._cancel_scheduled(
                        entity, [int(n) for n in body.get("sequence-numbers") or []]
                    )
                    return 200, "OK", {}, {}
                raise Refused("amqp:not-implemented", f"Operation {op} is not implemented.", 501)
        except Refused as refused:
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
            deadline = now_ms() + int(entity.lock_duration_s * 1000)
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
        except Refused as refused:
            if not delivery.settled:
                delivery.local.condition = Condition(refused.condition, refused.description)
                delivery.update(Delivery.REJECTED)
        delivery.settle()
        self._pump_all(container)


