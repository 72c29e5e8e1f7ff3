"""The delivery journal: one JSON line per settle (schema version 2).

Version 2 added two outcomes (``release``: handed back unseen; ``settle_failed``: the
settle call failed or was refused, so the broker delivers the message again); its fields
are those of version 1, and readers take both (``READABLE_VERSIONS``).

The schema is defined once, here (``JOURNAL_FIELDS``); the writer below and the PySpark
report both derive from it. Records are buffered in memory and written by one background
task at least every second (and on close), so the hot path never touches the disk and a
SIGTERM loses nothing. A kill -9 can leave a torn last line: readers skip it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from priority_pubsub.message import now_ms
from priority_pubsub.outcome import Kind

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions this code reads: a version only ever adds outcomes or nullable fields."""
FieldType = Literal["int", "long", "string"]


@dataclass(frozen=True, slots=True)
class JournalField:
    name: str
    type: FieldType
    nullable: bool
    doc: str


JOURNAL_FIELDS: tuple[JournalField, ...] = (
    JournalField("v", "int", False, "schema version, 2 (1: before release/settle_failed)"),
    JournalField("message_id", "string", False, "broker message id"),
    JournalField("queue", "string", False, "queue name"),
    JournalField("priority", "int", False, "0 = highest"),
    JournalField("driver", "string", False, "driver type (local, sqs, ...)"),
    JournalField("attempt", "int", False, "1-based attempt number, from the broker"),
    JournalField("enqueued_ms", "long", False, "epoch ms the broker accepted the message"),
    JournalField("received_ms", "long", False, "epoch ms this attempt was leased"),
    JournalField("forwarded_ms", "long", True, "epoch ms the request to the app started"),
    JournalField("settled_ms", "long", False, "epoch ms the outcome was settled"),
    JournalField("outcome", "string", False, ", ".join(k.value for k in Kind)),
    JournalField("http_status", "int", True, "the app's status code, null if none"),
    JournalField("reason", "string", True,
                 "why it was retried, dropped, dead-lettered, released or not settled"),
    JournalField("bytes", "long", False, "body size in bytes as received"),
)
OUTCOMES = tuple(kind.value for kind in Kind)
_FIELD_NAMES = tuple(f.name for f in JOURNAL_FIELDS)


@dataclass(slots=True)
class JournalRecord:
    """One settled attempt. Field order and names are ``JOURNAL_FIELDS``."""

    message_id: str
    queue: str
    priority: int
    driver: str
    attempt: int
    enqueued_ms: int
    received_ms: int
    forwarded_ms: int | None
    settled_ms: int
    outcome: str
    http_status: int | None
    reason: str | None
    bytes: int
    v: int = SCHEMA_VERSION

    def to_json(self) -> str:
        # Not dataclasses.asdict: it deep-copies every field, and was the largest single cost
        # per delivery in the sidecar's profile (bench/throughput.py). The fields are plain
        # values, so reading them in schema order gives the same line.
        ordered = {name: getattr(self, name) for name in _FIELD_NAMES}
        return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)


assert {f.name for f in JOURNAL_FIELDS} == set(JournalRecord.__dataclass_fields__)


def schema_markdown() -> str:
    """The schema as the README publishes it (a test keeps the README in step)."""
    rows = ["| field | type | null | meaning |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.type} | {'yes' if f.nullable else 'no'} | {f.doc} |"
             for f in JOURNAL_FIELDS]
    return "\n".join(rows)


def read_journal_lines(path: Path) -> tuple[list[dict[str, object]], int]:
    """Parse one journal file; returns (records, bad_line_count). Tolerates a torn last line."""
    records: list[dict[str, object]] = []
    bad = 0
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                continue
            if isinstance(value, dict) and value.get("v") in READABLE_VERSIONS:
                records.append(value)
            else:
                bad += 1
    return records, bad


class JournalWriter:
    """Buffered, size-rotated JSONL writer; ``append`` is cheap and never blocks the loop."""

    def __init__(self, directory: Path, rotate_mb: float, flush_interval_s: float = 1.0) -> None:
        self._directory = directory
        self._rotate_bytes = int(rotate_mb * 1024 * 1024)
        self._flush_interval_s = flush_interval_s
        self._pending: list[str] = []
        self._handle: IO[str] | None = None
        self._written = 0
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.records_written = 0

    @property
    def current_path(self) -> Path | None:
        return Path(self._handle.name) if self._handle else None

    def start(self) -> None:
        self._directory.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._flush_forever(), name="journal-flush")

    def append(self, record: JournalRecord) -> None:
        self._pending.append(record.to_json())

    async def flush(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            lines, self._pending = self._pending, []
            await asyncio.to_thread(self._write, lines)
            self.records_written += len(lines)

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
        if self._handle:
            self._handle.close()
            self._handle = None

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self._flush_interval_s)
            await self.flush()

    def _write(self, lines: list[str]) -> None:
        for line in lines:
            if self._handle is None or self._written >= self._rotate_bytes:
                self._rotate()
            assert self._handle is not None
            self._handle.write(line + "\n")
            self._written += len(line) + 1
        assert self._handle is not None
        self._handle.flush()

    def _rotate(self) -> None:
        if self._handle:
            self._handle.close()
        name = f"journal-{now_ms()}-{os.getpid()}.jsonl"
        path = self._directory / name
        suffix = 1
        while path.exists():  # two rotations in one millisecond
            path = self._directory / f"journal-{now_ms()}-{os.getpid()}-{suffix}.jsonl"
            suffix += 1
        self._handle = path.open("a", encoding="utf-8")
        self._written = 0
