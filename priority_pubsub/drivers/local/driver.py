"""The embedded local driver: durable queues in one SQLite file (WAL), stdlib only.

It is the default, so it is a product, not a test double:

* **Durable**: every publish and settle is a committed transaction; a kill -9 of the sidecar or
  of a publisher loses nothing (WAL with ``synchronous=NORMAL`` survives process crashes;
  choose ``synchronous: full`` to also survive power loss).
* **Multi-process**: a publisher CLI, the sidecar and a second replica may share the file.
  Claims run in ``BEGIN IMMEDIATE`` transactions, so two processes never lease the same row.
* **Leases**: a claim sets ``visible_at_ms`` to the lease deadline and a fresh claim token;
  every settle checks the token, so a settle after the lease lapsed and someone else claimed
  the message raises ``LeaseLost`` instead of deleting their work.
* **Attempts** are counted in the row at each claim (they survive restarts). A ``release``
  (a message handed back unseen, e.g. surplus of a wake-up) undoes its claim's count.
* **No hop for short work**: claims, settles and publishes (a few rows by index) run on the
  event loop's own connection when the file is not locked, else on the driver's SQLite
  thread, which waits for the lock (``busy_timeout_s``) off the loop (``sqlite_worker``).
* **Waiting** is cheap: a waiting receive sleeps on an in-process event, woken by this
  process's own writes, by another process's commits (``PRAGMA data_version``, checked every
  ``poll_interval_s``) and when the next delayed message falls due or the earliest lease ends
  (so a crashed replica's messages are taken over at its lease's end).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost, MessageTooLarge
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DeadLetter,
    DriverContext,
    DriverOptions,
    QueueDepth,
    map_errors,
    own_options,
)
from priority_pubsub.drivers.local.sqlite_worker import SqliteWorker

__all__ = [
    "DEAD_LETTER_REASON", "DEAD_LETTER_SOURCE", "SCHEMA_VERSION", "LocalDriver", "LocalOptions",
    "NewerSchema",
]
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    attributes TEXT NOT NULL DEFAULT '{}',
    content_type TEXT,
    enqueued_ms INTEGER NOT NULL,
    visible_at_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_token TEXT
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, visible_at_ms, seq);
"""

SCHEMA_VERSION = 1
"""The queue file's layout, kept in ``PRAGMA user_version``. 0 is a file written before the
version was recorded (0.1.0): its layout is version 1's, so opening it only records the
number. A later layout adds a step to ``_MIGRATIONS``; a file of a version above this one was
written by a newer release and is refused, never rewritten (an older release writing rows a
newer one reads differently is how a queue gets mangled)."""
_MIGRATIONS: dict[int, str] = {0: ""}
"""From version N to N + 1: the SQL to run (0 -> 1: the layout is unchanged)."""


_CLAIM = "UPDATE messages SET attempts = attempts + 1, lease_token = ?, visible_at_ms = ? "
_CLAIMED = "RETURNING seq, id, body, attributes, content_type, enqueued_ms, attempts"

_RELEASE = (
    "UPDATE messages SET visible_at_ms = ?, lease_token = NULL, "
    "attempts = max(attempts - 1, 0) WHERE seq = ?"
)
"""Return a claimed row as if it had not been claimed (its attempt count undone)."""


class LocalOptions(DriverOptions):
    path: Path = Path("./data/queues.db")
    max_message_bytes: int = Field(default=1_048_576, ge=1)
    poll_interval_s: float = Field(default=0.1, gt=0, le=5)
    busy_timeout_s: float = Field(default=10, gt=0)
    synchronous: Literal["normal", "full"] = "normal"


class LocalDriver:
    """SQLite-backed queues; see the module docstring for the guarantees."""

    name: ClassVar[str] = "local"
    options_model: ClassVar[type[DriverOptions]] = LocalOptions
    releases_count_as_attempts: ClassVar[bool] = False

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        self.options = options = own_options(options, LocalOptions)
        self.context = context
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
            await self._db.call(_open_schema, write=True)
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
                _CLAIM + "WHERE seq IN (SELECT seq FROM messages WHERE queue = ? AND "
                "visible_at_ms <= ? ORDER BY visible_at_ms, seq LIMIT ?) " + _CLAIMED,
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
            conn.executemany(_RELEASE, [(now_ms(), seq) for seq in seqs])

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
        await self._settle(message, _RELEASE + " AND lease_token = ?", (due,))
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

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        def rows(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT id, attributes, attempts, enqueued_ms, visible_at_ms FROM messages "
                "WHERE queue = ? AND lease_token IS NULL ORDER BY seq LIMIT ?", (queue, limit),
            ).fetchall()

        found = []
        for message_id, attributes, attempts, enqueued_ms, moved_ms in await self._run(
                rows, write=False):
            decoded = json.loads(attributes)
            found.append(DeadLetter(
                id=message_id, source=decoded.get(DEAD_LETTER_SOURCE),
                reason=decoded.get(DEAD_LETTER_REASON), attempts=attempts,
                first_seen_ms=enqueued_ms, last_seen_ms=moved_ms))
        return found

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        token = uuid.uuid4().hex
        lease_ms = int(self.context.lease_duration_s * 1000)
        wanted = list(ids)

        def claim(conn: sqlite3.Connection) -> tuple[list[tuple[Any, ...]], int]:
            now = now_ms()
            marks = ",".join("?" * len(wanted))
            return conn.execute(
                _CLAIM + f"WHERE queue = ? AND lease_token IS NULL AND id IN ({marks}) "
                + _CLAIMED, (token, now + lease_ms, queue, *wanted),
            ).fetchall(), now

        if not wanted:
            return []
        rows, claimed_ms = await self._run(claim, write=True)
        return [self._to_message(queue, row, token, claimed_ms + lease_ms, claimed_ms)
                for row in rows]

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


def _open_schema(conn: sqlite3.Connection) -> None:
    """Create or upgrade the layout inside the worker's transaction; refuse a newer file."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise NewerSchema(
            f"local queue file has schema version {found}, newer than this release's "
            f"{SCHEMA_VERSION}: written by a newer priority-pubsub; upgrade this one (or point "
            "driver.path at another file); the file was left untouched"
        )
    if not _has_messages_table(conn):  # a new file: today's layout
        _run_script(conn, _SCHEMA)
    else:
        for version in range(found, SCHEMA_VERSION):
            _run_script(conn, _MIGRATIONS[version])
    if found != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """Statement by statement: ``executescript`` would commit the worker's transaction."""
    for statement in filter(str.strip, script.split(";")):
        conn.execute(statement)


def _has_messages_table(conn: sqlite3.Connection) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
    ).fetchone() is not None


class NewerSchema(DriverError):
    """The queue file was written by a newer release: retrying cannot help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """sqlite3 errors -> project errors: locked, disk I/O, missing file may pass; the rest not.

    ``settling`` changes nothing here: a lost claim shows as no row updated, not as an error.
    """
    if isinstance(exc, sqlite3.OperationalError):
        return DriverUnavailable(f"{action}: {exc}")
    return DriverError(f"{action}: {exc}")


_sqlite_errors = functools.partial(map_errors, map_error, catch=(sqlite3.DatabaseError,))
