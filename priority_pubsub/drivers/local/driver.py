"""The embedded local driver: durable queues in one SQLite file (WAL), stdlib only: consume
and settle.

It is the default, so it is a product, not a test double (its guarantees:
docs/brokers/local.md). The code follows from SQLite's single writer: claims run in
``BEGIN IMMEDIATE`` transactions with a fresh claim token that every settle checks, so two
processes never lease the same row; short work runs on the event loop's own connection when
the file is not locked, else on the driver's SQLite thread (``sqlite_worker``), so the loop
never waits on another process's lock; a waiting receive sleeps on an in-process event, woken
by this process's writes, other processes' commits (``PRAGMA data_version``), the next due
delay and the earliest lease end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost, MessageTooLarge
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DriverContext,
    DriverKit,
    DriverOptions,
    QueueDepth,
    map_errors,
)
from priority_pubsub.drivers.local.monitoring import LocalMonitoring
from priority_pubsub.drivers.local.options import LocalOptions
from priority_pubsub.drivers.local.schema import CLAIM, CLAIMED, RELEASE, open_schema
from priority_pubsub.drivers.local.sqlite_worker import SqliteWorker

__all__ = ["DEAD_LETTER_REASON", "DEAD_LETTER_SOURCE", "LocalDriver", "LocalOptions"]
T = TypeVar("T")

class LocalDriver(LocalMonitoring, DriverKit[LocalOptions],
                  name="local", options_model=LocalOptions,
                  releases_count_as_attempts=False):
    """SQLite-backed queues; see the module docstring for the guarantees."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        super().__init__(options, context)
        options = self.options
        self._db = SqliteWorker(
            options.path, busy_timeout_s=options.busy_timeout_s,
            synchronous=options.synchronous.upper(),
        )
        self._changed = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._waiters = 0
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            self._db.start(asyncio.get_running_loop())
            await self._db.call(open_schema, write=True)
        except (sqlite3.Error, OSError) as exc:
            raise DriverUnavailable(
                f"cannot open local queue file {self.options.path}: {exc}"
            ) from exc
        self._started = True

    def missing_store(self) -> str | None:
        if self.options.path.exists():
            return None
        return (f"local queue file {self.options.path} does not exist (nothing published yet, "
                "or driver.path points elsewhere)")

    async def add_queue(self, queue: str) -> None:
        """Any name is a queue here (a column of the one table): nothing to make."""

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        if self._started:
            self._db.close_on_loop()
            await asyncio.to_thread(self._db.join_thread)
            self._started = False

    @property
    def dead_letter_enabled(self) -> bool:
        return self.context.dead_letter_queue is not None

    # -- consuming -------------------------------------------------------------------------

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        deadline = time.monotonic() + wait_s
        while True:
            changed = self._changed
            messages, next_due_ms = await self._claim(queue, max_messages)
            remaining = deadline - time.monotonic()
            if messages or remaining <= 0:
                return messages
            if next_due_ms is not None:
                remaining = min(remaining, max(0.0, (next_due_ms - now_ms()) / 1000) + 0.001)
            await self._wait_for_change(changed, remaining)

    async def _claim(self, queue: str, max_messages: int) -> tuple[list[Message], int | None]:
        token = uuid.uuid4().hex
        lease_ms = int(self.context.lease_duration_s * 1000)

        def claim(conn: sqlite3.Connection) -> tuple[list[tuple[Any, ...]], int | None, int]:
            now = now_ms()
            rows = conn.execute(
                CLAIM + "WHERE seq IN (SELECT seq FROM messages WHERE queue = ? AND "
                "visible_at_ms <= ? ORDER BY visible_at_ms, seq LIMIT ?) " + CLAIMED,
                (token, now + lease_ms, queue, now, max_messages),
            ).fetchall()
            next_due = None
            if not rows:  # a delayed retry falls due, or a lease (perhaps a dead replica's) ends
                next_due = conn.execute(
                    "SELECT min(visible_at_ms) FROM messages WHERE queue = ?", (queue,),
                ).fetchone()[0]
            return rows, next_due, now

        future = self._db.submit(claim, write=True, short=True)
        try:
            with _sqlite_errors("local queue file"):
                rows, next_due, claimed_ms = await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._release_orphans)
            raise
        deadline = claimed_ms + lease_ms
        messages = [self._to_message(queue, row, token, deadline, claimed_ms) for row in rows]
        return sorted(messages, key=lambda m: m.lease.token[1]), next_due

    def _release_orphans(self, future: asyncio.Future[Any]) -> None:
        """A claim finished after its receiver was cancelled: give the rows back at once."""
        if future.cancelled() or future.exception() is not None:
            return
        rows, _next_due, _claimed = future.result()
        seqs = [row[0] for row in rows]

        def release(conn: sqlite3.Connection) -> None:
            conn.executemany(RELEASE, [(now_ms(), seq) for seq in seqs])

        self._db.submit(release, write=True, short=True)
        self._notify()

    def _to_message(
        self, queue: str, row: tuple[Any, ...], token: str, deadline_ms: int, received_ms: int
    ) -> Message:
        seq, message_id, body, attributes, content_type, enqueued_ms, attempts = row
        return Message(
            id=message_id, queue=queue, priority=self.context.priority_of(queue),
            body=bytes(body), attributes=json.loads(attributes), attempt=attempts,
            enqueued_ms=enqueued_ms, lease=Lease(token=(token, seq), deadline_ms=deadline_ms),
            content_type=content_type, received_ms=received_ms,
        )

    async def _wait_for_change(self, changed: asyncio.Event, timeout_s: float) -> None:
        self._waiters += 1
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_other_processes(), name="local-watch")
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout_s)
        finally:
            self._waiters -= 1

    async def _watch_other_processes(self) -> None:
        """Poll ``PRAGMA data_version`` while someone waits: it moves on foreign commits."""
        last = None
        while self._waiters > 0:
            try:
                version = await self._db.call(
                    lambda conn: conn.execute("PRAGMA data_version").fetchone()[0],
                    write=False, short=True,
                )
            except sqlite3.Error:
                version = None
            if last is not None and version != last:
                self._notify()
            last = version
            await asyncio.sleep(self.options.poll_interval_s)

    async def _run(self, job: Callable[[sqlite3.Connection], T], *, write: bool,
                   short: bool = False) -> T:
        with _sqlite_errors("local queue file"):
            return await self._db.call(job, write=write, short=short)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- settling --------------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        await self._settle(message, "DELETE FROM messages WHERE seq = ? AND lease_token = ?", ())

    async def retry(self, message: Message, delay_s: float) -> None:
        due = now_ms() + int(delay_s * 1000)
        await self._settle(
            message,
            "UPDATE messages SET visible_at_ms = ?, lease_token = NULL "
            "WHERE seq = ? AND lease_token = ?",
            (due,),
        )
        self._notify()

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """Hand back unseen: visible after ``delay_s``, its claim's attempt undone."""
        due = now_ms() + int(delay_s * 1000)
        await self._settle(message, RELEASE + " AND lease_token = ?", (due,))
        self._notify()

    async def extend(self, message: Message, duration_s: float) -> None:
        deadline = now_ms() + int(duration_s * 1000)
        await self._settle(
            message, "UPDATE messages SET visible_at_ms = ? WHERE seq = ? AND lease_token = ?",
            (deadline,),
        )
        message.lease.deadline_ms = deadline

    async def dead_letter(self, message: Message, reason: str) -> None:
        target = self.context.dead_letter_queue
        if target is None:
            raise DriverError("no dead_letter.queue configured", retriable=False)
        attributes = {**message.attributes, DEAD_LETTER_REASON: reason,
                      DEAD_LETTER_SOURCE: message.queue}
        await self._settle(
            message,
            "UPDATE messages SET queue = ?, attributes = ?, visible_at_ms = ?, lease_token = NULL "
            "WHERE seq = ? AND lease_token = ?",
            (target, json.dumps(attributes), now_ms()),
        )

    async def _settle(self, message: Message, sql: str, params: tuple[Any, ...]) -> None:
        token, seq = message.lease.token

        def run(conn: sqlite3.Connection) -> int:
            return conn.execute(sql, (*params, seq, token)).rowcount

        if await self._run(run, write=True, short=True) == 0:
            raise LeaseLost(
                f"message {message.id} on {message.queue}: lease lapsed and was taken over"
            )

    # -- optional abilities: publish, depth, ping ------------------------------------------

    async def publish(
        self,
        queue: str,
        body: bytes,
        attributes: Mapping[str, str] | None = None,
        content_type: str | None = None,
        delay_s: float = 0.0,
    ) -> str:
        if len(body) > self.options.max_message_bytes:
            raise MessageTooLarge(
                f"message of {len(body)} bytes exceeds driver.max_message_bytes "
                f"({self.options.max_message_bytes})"
            )
        message_id = str(uuid.uuid4())
        encoded = json.dumps(dict(attributes or {}))

        def insert(conn: sqlite3.Connection) -> None:
            now = now_ms()
            conn.execute(
                "INSERT INTO messages (id, queue, body, attributes, content_type, enqueued_ms, "
                "visible_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (message_id, queue, body, encoded, content_type, now, now + int(delay_s * 1000)),
            )

        await self._run(insert, write=True, short=True)
        self._notify()
        return message_id

    async def depth(self, queue: str) -> QueueDepth:
        def count(conn: sqlite3.Connection) -> tuple[int, int, int, int | None]:
            now = now_ms()
            row = conn.execute(
                "SELECT "
                "coalesce(sum(lease_token IS NULL AND visible_at_ms <= ?), 0), "
                "coalesce(sum(lease_token IS NOT NULL AND visible_at_ms > ?), 0), "
                "coalesce(sum(lease_token IS NULL AND visible_at_ms > ?), 0), "
                "min(enqueued_ms) FROM messages WHERE queue = ?",
                (now, now, now, queue),
            ).fetchone()
            return row[0], row[1], row[2], row[3]

        visible, in_flight, delayed, oldest = await self._run(count, write=False)
        age = None if oldest is None else max(0.0, (now_ms() - oldest) / 1000)
        return QueueDepth(visible=visible, in_flight=in_flight, delayed=delayed, oldest_age_s=age)

    async def ping(self) -> None:
        """Readiness: the file must still be there and readable by a fresh connection."""
        path = self.options.path

        def probe() -> None:
            uri = f"file:{path.resolve()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=2)
            try:
                conn.execute("SELECT 1 FROM messages LIMIT 1").fetchall()
            finally:
                conn.close()

        try:
            await asyncio.to_thread(probe)
        except (sqlite3.Error, OSError) as exc:
            raise DriverUnavailable(f"local queue file {path} unusable: {exc}") from exc


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """sqlite3 errors -> project errors: locked, disk I/O, missing file may pass; the rest not.

    ``settling`` changes nothing here: a lost claim shows as no row updated, not as an error.
    """
    if isinstance(exc, sqlite3.OperationalError):
        return DriverUnavailable(f"{action}: {exc}")
    return DriverError(f"{action}: {exc}")


_sqlite_errors = functools.partial(map_errors, map_error, catch=(sqlite3.DatabaseError,))
