"""The Redis Streams driver (redis-py asyncio), laid out as Dapr's ``pubsub.redis``: consume
and settle.

What it does for an operator (layout, leases and attempts, delayed retries, dead letters,
trimming, depth, connection, what is not supported) is docs/brokers/redis.md. The code
follows from three choices:

- All state lives in Redis, so it survives sidecar restarts and is shared by replicas: a
  claim, every settle, a retry's parking and a dead letter are each one Lua script
  (``scripts``), which checks in the same atomic step that the entry is still pending for
  this consumer with the delivery count it was received with (else ``LeaseLost``). A script
  repeated because its reply was lost can at worst take a message one attempt early or
  report a settle that happened as ``LeaseLost``; it never loses one.
- A wait takes nothing: ``XREAD BLOCK`` from the group's last-delivered id (passive, so
  cancelling it loses nothing), cut short when the next delayed message falls due and every
  ``reclaim_interval_s``.
- Bad input never stops a queue: an entry that is not Dapr's layout is dead-lettered with the
  reason (``Message.defect``), keeping every field.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from priority_pubsub.core.errors import DriverError, LeaseLost, MessageTooLarge
from priority_pubsub.core.imports import without

# redis-py imports OpenTelemetry's metrics SDK at its own import when installed (the
# tracing extra installs it), for its observability, which is never configured here:
# 2.7 MB of resident set and ~40 ms of CPU at start (issue 28, bench.footprint).
with without("opentelemetry"):
    import redis.asyncio as aioredis
    from redis import exceptions as redis_errors
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    CONTENT_TYPE_ATTRIBUTE,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DriverContext,
    DriverKit,
    DriverOptions,
    QueueDepth,
    live_token,
)
from priority_pubsub.drivers.redis import scripts as redis_scripts
from priority_pubsub.drivers.redis.entries import (
    DATA_FIELD,
    METADATA_FIELD,
    attributes_of,
    fields_with,
    sdk_errors,
    text,
)
from priority_pubsub.drivers.redis.monitoring import RedisMonitoring
from priority_pubsub.drivers.redis.options import RedisOptions
from priority_pubsub.telemetry.logs import get_logger

__all__ = ["RedisDriver", "RedisLease", "RedisOptions", "connection_options"]

PARKED_SUFFIX = ":parked"
UNREAD_COUNT_CAP = 1000
"""How many entries ``depth`` reads at most on each side of a group's last-delivered id when
Redis reports no ``lag``: counted in Redis (no payload crosses the network) but each read
entry is copied there, so the cap bounds that work and memory on a long stream."""

log = get_logger(__name__)


def connection_options(options: RedisOptions) -> dict[str, Any]:
    """``from_url`` keyword arguments (credentials, TLS, connect timeout) shared by the
    driver's asyncio clients and the blocking client Dapr-mode publishing uses."""
    extra: dict[str, Any] = {"socket_connect_timeout": options.connect_timeout_s}
    if options.username is not None:
        extra["username"] = options.username
    if options.password is not None:
        extra["password"] = options.password.get_secret_value()
    if options.tls_ca_file is not None:
        extra["ssl_ca_certs"] = str(options.tls_ca_file)
    return extra


@dataclass(frozen=True, slots=True)
class RedisLease:
    """The lease token: which pending entry, and with which delivery count it was received."""

    stream: str
    entry_id: str
    deliveries: int
    fields: tuple[tuple[bytes, bytes], ...]
    """The entry as read, for dead-lettering it whole."""


@dataclass(frozen=True, slots=True)
class RedisWaiting:
    """The token of an entry ``receive_ids`` read without taking it: nobody's pending entry,
    so nothing to lapse. Its ack deletes it if the group has still not taken it; its release
    leaves it where it is."""

    stream: str
    entry_id: str


class RedisDriver(RedisMonitoring, DriverKit[RedisOptions],
                  name="redis", options_model=RedisOptions,
                  releases_count_as_attempts=False):
    """Redis Streams, one stream per priority; see the module docstring.

    Releases do not count as attempts: a release hands the entry back with its delivery count
    lowered by one."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        super().__init__(options, context)
        options = self.options
        self.consumer = options.consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.parked = options.group + PARKED_SUFFIX
        if self.consumer == self.parked:
            raise DriverError(f"driver.consumer: {self.parked!r} is reserved", retriable=False)
        self._client = self._make_client(options.call_timeout_s)
        self._waiter = self._make_client(None)  # blocking reads: bounded by wait_for instead
        self._scripts = {
            name: self._client.register_script(getattr(redis_scripts, name))
            for name in ("CLAIM", "ACK", "EXTEND", "PARK", "DEAD_LETTER", "FORGET_CONSUMER",
                         "UNREAD", "DELETE_WAITING", "MOVE_WAITING")
        }
        self._declared: set[str] = set()
        self._background: set[asyncio.Future[None]] = set()
        self._lease_ms = max(1, int(context.lease_duration_s * 1000))

    def _make_client(self, socket_timeout_s: float | None) -> aioredis.Redis:
        return aioredis.Redis.from_url(
            self.options.url.get_secret_value(), socket_timeout=socket_timeout_s,
            retry=Retry(NoBackoff(), 1), health_check_interval=30,
            **connection_options(self.options),
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        await self.ping()
        for stream in self._streams():
            await self._declare(stream)

    async def add_queue(self, queue: str) -> None:
        """A stream not configured at start: declared as at start (stream and group made
        when missing, as daprd's component does on subscribe)."""
        await self._declare(queue)

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.options.call_timeout_s)
        for stream in sorted(self._declared):
            try:
                await self._scripts["FORGET_CONSUMER"](
                    keys=[stream], args=[self.options.group, self.consumer]
                )
            except (redis_errors.RedisError, OSError):
                break  # unreachable: the name stays in the group, holding nothing
        for client in (self._client, self._waiter):
            await client.aclose()

    @property
    def dead_letter_enabled(self) -> bool:
        return self.context.dead_letter_queue is not None

    def _streams(self) -> list[str]:
        dead = self.context.dead_letter_queue
        return [*self.context.queues, *([dead] if dead else [])]

    async def _declare(self, stream: str) -> None:
        """Stream and group, from the stream's start; an existing group is left as it is."""
        with sdk_errors(f"declare group {self.options.group!r} on stream {stream!r}"):
            try:
                await self._client.xgroup_create(stream, self.options.group, id="0",
                                                 mkstream=True)
            except redis_errors.ResponseError as exc:
                if not str(exc).startswith("BUSYGROUP"):
                    raise
        self._declared.add(stream)

    # -- consuming -------------------------------------------------------------------------

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        if max_messages <= 0:
            return []
        deadline = time.monotonic() + wait_s
        while True:
            messages, last_id, next_due_ms = await self._claim(queue, max_messages)
            remaining = deadline - time.monotonic()
            if messages or remaining <= 0:
                return messages
            pause = min(remaining, self.options.reclaim_interval_s)
            if next_due_ms >= 0:
                pause = min(pause, max(0.001, (next_due_ms - now_ms()) / 1000))
            await self._wait_for_entry(queue, last_id, pause)

    async def _claim(self, queue: str, want: int) -> tuple[list[Message], str, int]:
        """One claim, shielded: if the receive is cancelled while the script runs, whatever
        it took is released (uncounted) as soon as it answers, not left to lapse."""
        claim = asyncio.ensure_future(self._claim_now(queue, want))
        try:
            return await asyncio.shield(claim)
        except asyncio.CancelledError:
            claim.add_done_callback(self._release_orphans)
            raise

    def _release_orphans(self, claim: asyncio.Future[tuple[list[Message], str, int]]) -> None:
        if claim.cancelled() or claim.exception() is not None:
            return
        for message in claim.result()[0]:
            task = asyncio.ensure_future(self._release_quietly(message))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _release_quietly(self, message: Message) -> None:
        try:
            await self.release(message)
        except DriverError as exc:  # it comes back when its lease lapses
            log.warning("redis release of an orphaned claim failed", message_id=message.id,
                        queue=message.queue, error=str(exc))

    async def _claim_now(self, queue: str, want: int) -> tuple[list[Message], str, int]:
        reply = await self._script(
            "CLAIM", queue, [queue, self._parked_set(queue)],
            [self.options.group, self.consumer, self.parked, self._lease_ms, want],
        )
        entries, last_id, next_due, gone = reply
        if gone:
            log.warning("redis entries trimmed while pending: dropped from the group",
                        queue=queue, ids=[text(i) for i in gone])
        received = now_ms()
        messages = [self._message(queue, entry, received) for entry in entries]
        return messages, text(last_id), int(next_due)

    async def _wait_for_entry(self, queue: str, last_id: str, timeout_s: float) -> None:
        """Block until an entry after ``last_id`` is added (or the timeout): takes nothing."""
        block_ms = max(1, int(timeout_s * 1000))
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that
        # arrives as the read completes, and the sidecar's shutdown would hang.
        with sdk_errors(f"wait on stream {queue!r}"):
            async with asyncio.timeout(timeout_s + self.options.call_timeout_s):
                await self._waiter.xread({queue: last_id}, block=block_ms, count=1)

    def _message(self, queue: str, entry: list[Any], received_ms: int,
                 waiting: bool = False) -> Message:
        raw_id, flat, deliveries = entry
        entry_id = text(raw_id)
        fields = tuple(zip(flat[::2], flat[1::2], strict=True))
        token: RedisLease | RedisWaiting = (
            RedisWaiting(queue, entry_id) if waiting
            else RedisLease(queue, entry_id, int(deliveries), fields))
        values = dict(fields)
        attributes, defect = attributes_of(values.get(METADATA_FIELD))
        body = values.get(DATA_FIELD)
        if body is None:
            names = sorted(text(name) for name in values)
            defect = f"stream entry has no 'data' field (fields: {', '.join(names) or 'none'})"
        content_type = attributes.pop(CONTENT_TYPE_ATTRIBUTE, None)
        return Message(
            id=entry_id, queue=queue, priority=self.context.priority_of(queue),
            body=body or b"", attributes=attributes, attempt=int(deliveries),
            enqueued_ms=int(entry_id.split("-", 1)[0]),
            lease=Lease(token, received_ms + self._lease_ms),
            content_type=content_type, received_ms=received_ms, defect=defect,
        )

    # -- settling --------------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        if isinstance(waiting := message.lease.token, RedisWaiting):
            await self._delete_waiting(message, waiting)
            return
        lease = _lease(message, "ack")
        state = await self._script("ACK", lease.stream, [lease.stream], [
            *self._owner_args(lease), int(self.options.delete_on_ack)])
        if state < 0:  # 0: no longer pending, i.e. already acked (a repeated ack)
            _lost("ack", message)

    async def retry(self, message: Message, delay_s: float) -> None:
        await self._park(message, "retry", delay_s, counted=True)

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """Hand the message back unseen: the next delivery has the same attempt number."""
        if isinstance(message.lease.token, RedisWaiting):
            return  # never taken: it still waits where it was
        await self._park(message, "release", delay_s, counted=False)

    async def _park(self, message: Message, verb: str, delay_s: float, *, counted: bool) -> None:
        lease = _lease(message, verb)
        retry_count = lease.deliveries if counted else max(0, lease.deliveries - 1)
        state = await self._script(
            "PARK", lease.stream, [lease.stream, self._parked_set(lease.stream)],
            [*self._owner_args(lease), self.parked, max(0, int(delay_s * 1000)), retry_count],
        )
        if state != 1:
            _lost(verb, message)

    async def extend(self, message: Message, duration_s: float) -> None:
        lease = _lease(message, "extend")
        started = now_ms()
        state = await self._script("EXTEND", lease.stream, [lease.stream],
                                   self._owner_args(lease))
        if state != 1:
            _lost("extend", message)
        message.lease.deadline_ms = started + min(self._lease_ms, int(duration_s * 1000))

    async def dead_letter(self, message: Message, reason: str) -> None:
        target = self.context.dead_letter_queue
        if target is None:
            raise DriverError("dead_letter: no dead_letter.queue configured")
        lease = _lease(message, "dead_letter")
        fields = self._dead_letter_fields(message, lease, reason)
        state = await self._script("DEAD_LETTER", lease.stream, [lease.stream, target], [
            *self._owner_args(lease), int(self.options.delete_on_ack), *fields])
        if state != 1:
            _lost("dead_letter", message)

    def _dead_letter_fields(self, message: Message, lease: RedisLease, reason: str) -> list[bytes]:
        """The original fields, with ``metadata`` replaced by the attributes plus the reason
        (a malformed original ``metadata`` is kept as ``malformed_metadata``)."""
        attributes = dict(message.attributes)
        if message.content_type:
            attributes[CONTENT_TYPE_ATTRIBUTE] = message.content_type
        attributes |= {DEAD_LETTER_REASON: reason, DEAD_LETTER_SOURCE: message.queue}
        return fields_with(lease.fields, attributes)

    def _owner_args(self, lease: RedisLease) -> list[Any]:
        return [self.options.group, self.consumer, lease.entry_id, lease.deliveries]

    # -- optional abilities: depth, publish, ping ------------------------------------------

    async def depth(self, queue: str) -> QueueDepth:
        group = await self._group_info(queue)
        parked_set = self._parked_set(queue)
        now = now_ms()
        with sdk_errors(f"depth of {queue!r}"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zcard(parked_set)
                pipe.zcount(parked_set, "-inf", now)
                pipe.xrange(queue, min=f"({group['last-delivered-id']}", count=1)
                parked, due, oldest = await pipe.execute()
        lag = await self._lag(queue, group)
        age = None
        if oldest:
            age = max(0.0, (now - int(text(oldest[0][0]).split("-", 1)[0])) / 1000)
        return QueueDepth(
            visible=None if lag is None else lag + int(due),
            in_flight=int(group["pending"]) - int(parked),
            delayed=int(parked) - int(due), oldest_age_s=age,
        )

    async def _lag(self, queue: str, group: dict[str, Any]) -> int | None:
        """Entries not yet delivered to the group. Redis reports ``lag`` as null when it
        cannot tell (after it reloads its append-only file, or an entry was deleted mid-stream):
        then they are counted in Redis, reading at most ``UNREAD_COUNT_CAP`` entries on each
        side of the group's last-delivered id; beyond that the answer is None ("cannot say",
        as every ``QueueDepth`` field): a cap reported as a count would pass for the backlog."""
        if group.get("lag") is not None:
            return int(group["lag"])
        with sdk_errors(f"depth of {queue!r}"):
            unread = await self._scripts["UNREAD"](
                keys=[queue], args=[group["last-delivered-id"], UNREAD_COUNT_CAP])
        return None if int(unread) < 0 else int(unread)

    async def _group_info(self, queue: str) -> dict[str, Any]:
        for attempt in range(2):
            try:
                with sdk_errors(f"depth of {queue!r}"):
                    groups = await self._client.xinfo_groups(queue)
            except DriverError as exc:
                if attempt == 0 and _missing(exc):
                    await self._declare(queue)
                    continue
                raise
            for group in groups:
                if text(group["name"]) == self.options.group:
                    return {text(k): v for k, v in group.items()} | {
                        "last-delivered-id": text(group["last-delivered-id"])}
            await self._declare(queue)
        raise DriverError(f"redis: group {self.options.group!r} missing on {queue!r}")

    async def _delete_waiting(self, message: Message, waiting: RedisWaiting) -> None:
        deleted = await self._script("DELETE_WAITING", waiting.stream, [waiting.stream],
                                     [self.options.group, waiting.entry_id])
        if int(deleted) != 1:
            message.lease.lost = True
            raise LeaseLost(
                f"ack: entry {waiting.entry_id} of {waiting.stream} is gone or was taken by "
                "the group meanwhile (another requeue or delete got it first)")

    async def publish(self, queue: str, body: bytes, attributes: Mapping[str, str] | None = None,
                      content_type: str | None = None) -> str:
        metadata = dict(attributes or {})
        if content_type:
            metadata[CONTENT_TYPE_ATTRIBUTE] = content_type
        fields: dict[bytes, bytes] = {DATA_FIELD: body}
        if metadata:
            fields[METADATA_FIELD] = json.dumps(metadata).encode()
        size = sum(len(v) for v in fields.values())
        if size > self.options.max_message_bytes:
            raise MessageTooLarge(
                f"publish: {size} bytes exceeds driver.max_message_bytes "
                f"({self.options.max_message_bytes})"
            )
        with sdk_errors(f"publish to {queue!r}"):
            entry_id = await self._client.xadd(
                queue, fields,  # type: ignore[arg-type]  # bytes keys are fine on the wire
                maxlen=self.options.max_len_approx, approximate=True,
            )
        return text(entry_id)

    async def ping(self) -> None:
        with sdk_errors("ping"):
            await self._client.ping()

    # -- plumbing --------------------------------------------------------------------------

    async def _script(self, name: str, stream: str, keys: list[str], args: list[Any]) -> Any:
        """Run one script; a group that vanished (Redis restarted without persistence, or a
        stream deleted) is declared again, once, as Dapr does on NOGROUP."""
        for attempt in range(2):
            try:
                with sdk_errors(f"{name.lower()} on {stream!r}"):
                    return await self._scripts[name](keys=keys, args=args)
            except DriverError as exc:
                if attempt == 0 and _missing(exc):
                    log.warning("redis group missing: declaring it again", stream=stream,
                                group=self.options.group)
                    await self._declare(stream)
                    continue
                raise
        raise AssertionError("unreachable")

    def _parked_set(self, stream: str) -> str:
        return f"priority-pubsub:parked:{{{stream}}}:{self.options.group}"


def _lease(message: Message, verb: str) -> RedisLease:
    """The token; the lease's deadline is not checked here: every settle asks Redis, in the
    same atomic step, whether the entry is still this consumer's (a late ack of an entry
    nobody reclaimed is still right)."""
    return live_token(message, RedisLease, verb, grace_ms=math.inf)


def _lost(verb: str, message: Message) -> NoReturn:
    message.lease.lost = True
    raise LeaseLost(
        f"{verb}: message {message.id} on {message.queue} is no longer held by this consumer "
        "(its lease lapsed and another consumer reclaimed it, or it was settled)"
    )


def _missing(exc: DriverError) -> bool:
    """The stream or the group is gone (deleted, or Redis lost its data)."""
    cause = exc.__cause__
    return isinstance(cause, redis_errors.ResponseError) and (
        "NOGROUP" in str(cause) or "no such key" in str(cause).lower())
