"""The Redis Streams driver (redis-py asyncio), laid out as Dapr's ``pubsub.redis``.

Layout (components-contrib ``pubsub/redis/redis.go``): one stream per queue (stream = topic),
one consumer group (``driver.group``; with Dapr it is the component's ``consumerID``) created
from the stream's start (``XGROUP CREATE stream group 0 MKSTREAM``, as Dapr does, so nothing
published before the first start is skipped), the body in the entry's field ``data`` and the
attributes as a JSON object in field ``metadata``: what daprd publishes is read unchanged, and
``publish`` writes what daprd would. The streams and groups of the configured queues and of
the dead-letter queue are declared at start, idempotently (Redis clients create what they
consume from; a stream or group lost later, e.g. to a Redis restart without persistence, is
declared again on first use).

Leases, attempts, retries (all state lives in Redis, so it survives restarts of sidecars):

* receive = one script (``redis_scripts.CLAIM``): returned messages whose delay is over,
  then lapsed leases, then ``XREADGROUP`` of new entries — never more than asked. When
  nothing is there and ``wait_s > 0``, it blocks in ``XREAD BLOCK`` from the group's
  last-delivered id: a passive read that takes nothing, so cancelling it loses nothing. The
  wait is cut short when the next delayed message falls due, and every
  ``reclaim_interval_s`` to look for lapsed leases.
* lease = the pending entry's idle time: ``extend`` resets it (``XCLAIM ... JUSTID``); an
  entry idle for ``lease.duration_s`` is reclaimed by whichever replica claims next
  (``XCLAIM`` with that min-idle time: only one wins).
* attempt = the pending entry's delivery count (``XREADGROUP`` counts 1, every ``XCLAIM``
  one more). Every settle checks in the same atomic step that the entry is still pending for
  this consumer with the delivery count it was received with, else ``LeaseLost``.
* retry(delay) keeps the entry in the group's pending list, handed to the reserved consumer
  ``<group>:parked`` with its due time in the sorted set ``priority-pubsub:parked:{<stream>}:
  <group>``; the next claim after the due time moves it back (counting one delivery). Nothing
  is added to the stream, so other groups reading the same topic (Dapr fan-out) see no copy.
  ``release`` does the same with the delivery count lowered by one: no attempt is counted.
* dead_letter = ``XADD`` to the ``dead_letter.queue`` stream (the original fields, the
  metadata plus ``dead_letter_reason`` and ``dead_letter_source``) and ``XACK``, atomically.
* the monitor's dead letters: ``browse`` lists the dead-letter stream's entries after the
  group's last-delivered id (``XRANGE``); ``receive_ids`` reads chosen ones by id without
  taking them into the group (``RedisWaiting``), and their ack is an ``XDEL`` (script
  ``DELETE_WAITING``, only while the group has not taken the entry), their release nothing.
* the monitor's promote of a waiting message (``move_waiting``): its copy added to the
  higher queue and the entry deleted in one script (``MOVE_WAITING``), only while the group
  has not taken it and only where the group is the stream's only one (a deleted entry is
  gone for every group): a worker taking it meanwhile can never leave it in both.
* ack = ``XACK``. The entry stays in the stream (other groups may not have read it): trim
  with ``max_len_approx`` (``XADD MAXLEN ~``, Dapr's ``maxLenApprox``) at publish, or set
  ``delete_on_ack: true`` (``XDEL`` too) when this group is the stream's only reader. An entry
  trimmed away while pending or parked is dropped from the pending list and logged.

Bad input never stops a queue: an entry without ``data`` or with a ``metadata`` field that
is not a JSON object of strings is delivered to no app; it is dead-lettered with the reason
(``Message.defect``), keeping every field. A body that is not UTF-8 is data like any other
(forwarded as ``data_base64``).

Connection: ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``) is a secret: its
password is masked wherever the config is printed; ``password``/``username`` may come
separately (``PRIORITY_PUBSUB_DRIVER__PASSWORD``). Every Redis error is mapped once, in
``map_error``: connection trouble and a loading server are retriable
(``DriverUnavailable``), anything else terminal. redis-py retries a call once, at once, after
a connection error (a pooled connection the server closed, e.g. across a restart); beyond
that the worker retries settles and the sidecar reconnects. A script repeated because its
reply was lost can at worst take a message one attempt early (it comes back when its lease
lapses) or report a settle that happened as ``LeaseLost``; it never loses a message.

Depth: ``visible`` is the group's ``lag`` (entries not yet delivered) plus the parked
messages now due. Redis reports ``lag`` as null after reloading its append-only file (or once
an entry was deleted mid-stream); the entries after the last-delivered id are then counted in
Redis, reading at most ``UNREAD_COUNT_CAP`` on each side of that id, and ``visible`` is None
(unknown) beyond it, never the cap passed off as the backlog.

Not supported: Redis Cluster (a dead letter and its source are written in one script, and
stream names are not hash-tagged) and Sentinel.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import re
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NoReturn, cast

from pydantic import Field, SecretStr, field_validator

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost, MessageTooLarge
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
from priority_pubsub.core.redaction import CredentialUrl, SecretUrl
from priority_pubsub.drivers.base import (
    CONTENT_TYPE_ATTRIBUTE,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DeadLetter,
    DriverContext,
    DriverOptions,
    NotAddressable,
    QueueDepth,
    live_token,
    map_errors,
    own_options,
)
from priority_pubsub.drivers.redis import scripts as redis_scripts
from priority_pubsub.telemetry.logs import get_logger

__all__ = ["RedisDriver", "RedisLease", "RedisOptions", "connection_options", "map_error"]

DATA_FIELD = b"data"
METADATA_FIELD = b"metadata"
MALFORMED_METADATA_FIELD = b"malformed_metadata"
PARKED_SUFFIX = ":parked"
UNREAD_COUNT_CAP = 1000
"""How many entries ``depth`` reads at most on each side of a group's last-delivered id when
Redis reports no ``lag``: counted in Redis (no payload crosses the network) but each read
entry is copied there, so the cap bounds that work and memory on a long stream."""
_SCHEMES = ("redis://", "rediss://", "unix://")

log = get_logger(__name__)


class RedisOptions(DriverOptions):
    """The ``driver:`` keys for ``type: redis``."""

    url: CredentialUrl = SecretUrl("redis://127.0.0.1:6379/0")
    """``redis://[user:password@]host:port/db``, ``rediss://`` for TLS; a secret."""
    username: str | None = None
    password: SecretStr | None = None
    """Overrides the URL's password (from a Kubernetes Secret through the environment)."""
    tls_ca_file: Path | None = None
    """CA bundle for ``rediss://`` servers with a private CA."""
    group: str = Field(default="priority-pubsub", min_length=1)
    """The consumer group; with Dapr, the component's ``consumerID`` (default: the app id)."""
    consumer: str | None = Field(default=None, min_length=1)
    """This replica's consumer name in the group; default ``<hostname>-<pid>``."""
    max_len_approx: int | None = Field(default=None, ge=1)
    """``XADD MAXLEN ~`` at publish (Dapr's ``maxLenApprox``); none: the stream is not trimmed."""
    delete_on_ack: bool = False
    """``XDEL`` acked entries too; only when this group is the stream's only reader."""
    reclaim_interval_s: float = Field(default=5.0, gt=0, le=300)
    """While idle, how often lapsed leases (of a replica that died) are looked for."""
    call_timeout_s: float = Field(default=10.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    max_message_bytes: int = Field(default=1_048_576, ge=1, le=536_870_912)

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: SecretUrl) -> SecretUrl:
        if not value.get_secret_value().startswith(_SCHEMES):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value


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


class RedisDriver:
    """Redis Streams, one stream per priority; see the module docstring."""

    name: ClassVar[str] = "redis"
    options_model: ClassVar[type[DriverOptions]] = RedisOptions
    releases_count_as_attempts: ClassVar[bool] = False
    """A release hands the entry back with its delivery count lowered by one."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        self.options = options = own_options(options, RedisOptions)
        self.context = context
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
        with _redis_errors(f"declare group {self.options.group!r} on stream {stream!r}"):
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
                        queue=queue, ids=[_text(i) for i in gone])
        received = now_ms()
        messages = [self._message(queue, entry, received) for entry in entries]
        return messages, _text(last_id), int(next_due)

    async def _wait_for_entry(self, queue: str, last_id: str, timeout_s: float) -> None:
        """Block until an entry after ``last_id`` is added (or the timeout): takes nothing."""
        block_ms = max(1, int(timeout_s * 1000))
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that
        # arrives as the read completes, and the sidecar's shutdown would hang.
        with _redis_errors(f"wait on stream {queue!r}"):
            async with asyncio.timeout(timeout_s + self.options.call_timeout_s):
                await self._waiter.xread({queue: last_id}, block=block_ms, count=1)

    def _message(self, queue: str, entry: list[Any], received_ms: int,
                 waiting: bool = False) -> Message:
        raw_id, flat, deliveries = entry
        entry_id = _text(raw_id)
        fields = tuple(zip(flat[::2], flat[1::2], strict=True))
        token: RedisLease | RedisWaiting = (
            RedisWaiting(queue, entry_id) if waiting
            else RedisLease(queue, entry_id, int(deliveries), fields))
        values = dict(fields)
        attributes, defect = _attributes(values.get(METADATA_FIELD))
        body = values.get(DATA_FIELD)
        if body is None:
            names = sorted(_text(name) for name in values)
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
        return _fields_with(lease.fields, attributes)

    def _owner_args(self, lease: RedisLease) -> list[Any]:
        return [self.options.group, self.consumer, lease.entry_id, lease.deliveries]

    # -- optional abilities: depth, publish, ping ------------------------------------------

    async def depth(self, queue: str) -> QueueDepth:
        group = await self._group_info(queue)
        parked_set = self._parked_set(queue)
        now = now_ms()
        with _redis_errors(f"depth of {queue!r}"):
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.zcard(parked_set)
                pipe.zcount(parked_set, "-inf", now)
                pipe.xrange(queue, min=f"({group['last-delivered-id']}", count=1)
                parked, due, oldest = await pipe.execute()
        lag = await self._lag(queue, group)
        age = None
        if oldest:
            age = max(0.0, (now - int(_text(oldest[0][0]).split("-", 1)[0])) / 1000)
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
        with _redis_errors(f"depth of {queue!r}"):
            unread = await self._scripts["UNREAD"](
                keys=[queue], args=[group["last-delivered-id"], UNREAD_COUNT_CAP])
        return None if int(unread) < 0 else int(unread)

    async def _group_info(self, queue: str) -> dict[str, Any]:
        for attempt in range(2):
            try:
                with _redis_errors(f"depth of {queue!r}"):
                    groups = await self._client.xinfo_groups(queue)
            except DriverError as exc:
                if attempt == 0 and _missing(exc):
                    await self._declare(queue)
                    continue
                raise
            for group in groups:
                if _text(group["name"]) == self.options.group:
                    return {_text(k): v for k, v in group.items()} | {
                        "last-delivered-id": _text(group["last-delivered-id"])}
            await self._declare(queue)
        raise DriverError(f"redis: group {self.options.group!r} missing on {queue!r}")

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        """The entries the group has not taken yet (``XRANGE`` after its last-delivered id):
        what waits, read without ``XREADGROUP``, so nothing is leased or counted."""
        group = await self._group_info(queue)
        with _redis_errors(f"browse {queue!r}"):
            # redis-py types replies loosely; without decode_responses they are bytes
            entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await self._client.xrange(
                queue, min=f"({group['last-delivered-id']}", count=limit))
        letters = []
        for raw_id, values in entries:
            entry_id = _text(raw_id)
            attributes, _ = _attributes(values.get(METADATA_FIELD))
            letters.append(DeadLetter(
                id=entry_id, source=attributes.get(DEAD_LETTER_SOURCE),
                reason=attributes.get(DEAD_LETTER_REASON), attempts=None,
                first_seen_ms=None, last_seen_ms=int(entry_id.split("-", 1)[0])))
        return letters

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        """The chosen entries among those ``browse`` lists (after the group's last-delivered
        id), read with ``XRANGE`` and taken by nobody: the group's pending list is not
        touched, since ``XREADGROUP`` could only take the oldest. ``ack`` then deletes the
        entry (``XDEL``, if the group has still not taken it), ``release`` leaves it. The CLI's
        ``requeue`` (publish, then ack) works on them unchanged: a requeue cut short between
        its two steps leaves the message in both streams, never in neither."""
        group = await self._group_info(queue)
        last = _entry_order(group["last-delivered-id"])
        wanted = [i for i in dict.fromkeys(ids) if _ENTRY_ID.match(i) and _entry_order(i) > last]
        if not wanted:
            return []
        with _redis_errors(f"read chosen entries of {queue!r}"):
            async with self._client.pipeline(transaction=False) as pipe:
                for entry_id in wanted:
                    pipe.xrange(queue, min=entry_id, max=entry_id, count=1)
                found = await pipe.execute()
        received = now_ms()
        messages = []
        for entries in found:
            for raw_id, values in entries:  # values: a dict of bytes (no decode_responses)
                flat = [item for pair in values.items() for item in pair]
                messages.append(self._message(queue, [raw_id, flat, 1], received,
                                              waiting=True))
        return messages

    async def move_waiting(self, queue: str, message_id: str, to_queue: str,
                           attributes: Mapping[str, str]) -> str | None:
        """``WaitingMover`` (the monitor's promote): the entry read by id, then one script
        (``MOVE_WAITING``) adds its copy to ``to_queue`` with ``attributes`` added and deletes
        it, if the group has still not taken it. Only where this group is the stream's only
        one: an entry deleted is gone for every group (``NotAddressable`` otherwise)."""
        if not _ENTRY_ID.match(message_id):
            return None
        with _redis_errors(f"read entry {message_id} of {queue!r}"):
            entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await self._client.xrange(
                queue, min=message_id, max=message_id, count=1))
        if not entries:
            return None
        values = entries[0][1]
        kept, _ = _attributes(values.get(METADATA_FIELD))
        fields = _fields_with(values.items(), kept | dict(attributes))
        moved = await self._script("MOVE_WAITING", queue, [queue, to_queue], [
            self.options.group, message_id, self.options.max_len_approx or "", *fields])
        if moved == -1:
            raise NotAddressable(
                f"redis: stream {queue!r} is read by another consumer group too: a waiting "
                "entry taken out of it would be gone for that group as well")
        return None if moved == 0 else _text(moved)

    async def _delete_waiting(self, message: Message, waiting: RedisWaiting) -> None:
        deleted = await self._script("DELETE_WAITING", waiting.stream, [waiting.stream],
                                     [self.options.group, waiting.entry_id])
        if int(deleted) != 1:
            message.lease.lost = True
            raise LeaseLost(
                f"ack: entry {waiting.entry_id} of {waiting.stream} is gone or was taken by "
                "the group meanwhile (another requeue or delete got it first)")

    async def publish(
        self,
        queue: str,
        body: bytes,
        attributes: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> str:
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
        with _redis_errors(f"publish to {queue!r}"):
            entry_id = await self._client.xadd(
                queue, fields,  # type: ignore[arg-type]  # bytes keys are fine on the wire
                maxlen=self.options.max_len_approx, approximate=True,
            )
        return _text(entry_id)

    async def ping(self) -> None:
        with _redis_errors("ping"):
            await self._client.ping()

    # -- plumbing --------------------------------------------------------------------------

    async def _script(self, name: str, stream: str, keys: list[str], args: list[Any]) -> Any:
        """Run one script; a group that vanished (Redis restarted without persistence, or a
        stream deleted) is declared again, once, as Dapr does on NOGROUP."""
        for attempt in range(2):
            try:
                with _redis_errors(f"{name.lower()} on {stream!r}"):
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


def _fields_with(fields: Iterable[tuple[bytes, bytes]], attributes: Mapping[str, str]
                 ) -> list[bytes]:
    """An entry's fields, ``metadata`` replaced by ``attributes`` (a malformed original
    ``metadata`` kept as ``malformed_metadata``): a dead letter's, a promoted copy's."""
    flat: list[bytes] = []
    for name, value in fields:
        if name == METADATA_FIELD:
            if _attributes(value)[1] is not None:
                flat += [MALFORMED_METADATA_FIELD, value]
            continue
        flat += [name, value]
    return [*flat, METADATA_FIELD, json.dumps(dict(attributes)).encode()]


def _attributes(raw: bytes | None) -> tuple[dict[str, str], str | None]:
    """Dapr's ``metadata`` field (a JSON object of strings) as attributes, or why it is not."""
    if raw is None:
        return {}, None
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return {}, "stream entry's 'metadata' field is not UTF-8"
    except json.JSONDecodeError as exc:
        return {}, f"stream entry's 'metadata' field is not JSON: {exc}"
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return {}, "stream entry's 'metadata' field is not a JSON object of strings"
    return value, None


_ENTRY_ID = re.compile(r"\A\d{1,20}-\d{1,20}\Z")


def _entry_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


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


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _missing(exc: DriverError) -> bool:
    """The stream or the group is gone (deleted, or Redis lost its data)."""
    cause = exc.__cause__
    return isinstance(cause, redis_errors.ResponseError) and (
        "NOGROUP" in str(cause) or "no such key" in str(cause).lower())


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """The one place Redis errors become project errors: retriable or terminal.

    ``settling`` changes nothing: a lost lease shows as a script's answer, not as an error.
    """
    if isinstance(exc, redis_errors.AuthenticationError | redis_errors.AuthorizationError):
        return DriverError(f"redis: {action}: not allowed: {exc}", retriable=False)
    if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError | OSError):
        return DriverUnavailable(f"redis: {action}: {type(exc).__name__}: {exc}")
    if isinstance(exc, redis_errors.ResponseError) and str(exc).startswith(
            ("LOADING", "MASTERDOWN", "TRYAGAIN", "READONLY")):
        return DriverUnavailable(f"redis: {action}: {exc}")
    return DriverError(f"redis: {action}: {exc}", retriable=False)


_redis_errors = functools.partial(
    map_errors, map_error, catch=(redis_errors.RedisError, OSError, TimeoutError))
