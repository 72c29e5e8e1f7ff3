"""What only the monitor asks of the local queue file: list a queue's waiting rows
(``browse``) and claim chosen ones by id (``receive_ids``).

A mixin of ``LocalDriver`` (the monitor finds these abilities on the driver through the
``DeadLetterBrowser`` and ``IdReceiver`` protocols); consume and settle never use it. It runs
on the driver's SQLite worker and builds messages as ``receive`` does.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from priority_pubsub.core.message import Message, now_ms
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DeadLetter,
    DriverContext,
)
from priority_pubsub.drivers.local.schema import CLAIM, CLAIMED

__all__ = ["LocalMonitoring"]

T = TypeVar("T")


class LocalMonitoring:
    """The monitor's abilities, on the driver's SQLite worker."""

    if TYPE_CHECKING:  # the driver's parts these methods use
        context: DriverContext

        async def _run(self, job: Callable[[sqlite3.Connection], T], *, write: bool,
                       short: bool = False) -> T: ...
        def _to_message(self, queue: str, row: tuple[Any, ...], token: str, deadline_ms: int,
                        received_ms: int) -> Message: ...

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
                CLAIM + f"WHERE queue = ? AND lease_token IS NULL AND id IN ({marks}) "
                + CLAIMED, (token, now + lease_ms, queue, *wanted),
            ).fetchall(), now

        if not wanted:
            return []
        rows, claimed_ms = await self._run(claim, write=True)
        return [self._to_message(queue, row, token, claimed_ms + lease_ms, claimed_ms)
                for row in rows]
