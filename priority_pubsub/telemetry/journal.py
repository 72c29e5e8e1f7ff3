"""The delivery journal: one JSON line per settle (schema version 4).

Version 2 added two outcomes (``release``: handed back unseen; ``settle_failed``: the
settle call failed or was refused, so the broker delivers the message again); its fields
are those of version 1. Version 3 added one nullable field, ``promoted_after_s`` (the
starvation bound took the message ahead of higher queues). Version 4 added ``slots`` (the
slots of ``concurrency`` the message occupied, when its queue's ``slots`` is above 1; null
is 1). Readers take all four (``READABLE_VERSIONS``): a field a line lacks reads as null.

The schema is defined once, here (``JOURNAL_FIELDS``); the writer below and the PySpark
report both derive from it. Each line is written when its attempt is settled, with one
unbuffered ``write`` to a file opened ``O_APPEND`` (no user-space buffer): once written it is
the kernel's, so a kill -9 of the sidecar loses no line already settled (a user-space buffer
flushed every second lost up to a second of lines per kill). ``fsync: every_line`` also
syncs each line to disk, to survive power loss, at a cost measured in ``bench/journal.py``.
A line cut by a crash of the machine mid-write is skipped by readers.

Closed files. A file being written is named ``journal-<replica>-<seq>.jsonl.open``; it is
renamed to ``journal-<replica>-<seq>.jsonl`` when it is rotated and at a clean stop, so a name
ending in ``.jsonl`` is complete and never grows again: the report reads each closed file once
and never an open one. The next start of a sidecar that crashed closes (renames) the files its
replica left open. The replica is the pod's name (``POD_NAME``, ``core.pod``), else the host
name, and the sequence continues from the highest one in the directory, so no two files share
a name: one sidecar per replica name and journal directory (two sharing one would close each
other's files).

Uploaded files (``journal.upload``, ``shipping``). The writer tells ``on_closed`` each file
it closes; the uploader removes a file once the store holds it, and notes its sequence in
``.journal-<replica>.last`` (``remember_last_seq``) so a later start, finding no file of its
replica, still continues the sequence: a file name, and so its object key, is never reused.
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from priority_pubsub.core.outcome import Kind
from priority_pubsub.core.pod import Pod
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
FsyncPolicy = Literal["none", "every_line"]

SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
"""Versions this code reads: a version only ever adds outcomes or nullable fields."""
FieldType = Literal["int", "long", "double", "string"]
OPEN_SUFFIX = ".open"
"""The suffix of a journal file still being written (readers skip it)."""
UPLOADED_SUFFIX = ".uploaded"
"""The suffix of a closed file kept after its upload (``journal.upload.keep_local``)."""
CLOSED_NAME = re.compile(r"journal-(?P<replica>[A-Za-z0-9._]+)-(?P<seq>\d+)\.jsonl")
"""A journal file's name (``journal-<replica>-<seq>.jsonl``) and any suffix after it."""


@dataclass(frozen=True, slots=True)
class JournalField:
    name: str
    type: FieldType
    nullable: bool
    doc: str


JOURNAL_FIELDS: tuple[JournalField, ...] = (
    JournalField("v", "int", False,
                 "schema version, 4 (3: before slots; 2: before promoted_after_s; 1: before "
                 "release/settle_failed)"),
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
    JournalField("promoted_after_s", "double", True,
                 "set when the starvation bound (queues[].max_wait_s) took it ahead of higher "
                 "queues: how long its queue had gone untried"),
    JournalField("slots", "int", True,
                 "slots of concurrency the message occupied at the app (queues[].slots), set "
                 "when above 1; null: 1"),
)
OUTCOMES = tuple(kind.value for kind in Kind)
_FIELD_NAMES = tuple(f.name for f in JOURNAL_FIELDS)
_FIELD_VALUES = operator.attrgetter(*_FIELD_NAMES)
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""Built once: ``json.dumps`` with any non-default option builds a new encoder per call."""


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
    promoted_after_s: float | None = None
    slots: int | None = None
    v: int = SCHEMA_VERSION

    def to_json(self) -> str:
        # Not dataclasses.asdict: it deep-copies every field, and was the largest single cost
        # per delivery in the sidecar's profile (bench/throughput.py). The fields are plain
        # values, so reading them in schema order (one attrgetter call, not a getattr per
        # field) gives the same line.
        return _ENCODE(dict(zip(_FIELD_NAMES, _FIELD_VALUES(self), strict=True)))


assert {f.name for f in JOURNAL_FIELDS} == set(JournalRecord.__dataclass_fields__)


def schema_markdown() -> str:
    """The schema as docs/operations/journal.md publishes it (a test keeps the page in step)."""
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
    """Size-rotated JSONL writer: one unbuffered append per line, optionally synced; each
    file written as ``.jsonl.open`` and renamed to ``.jsonl`` once complete."""

    def __init__(
        self, directory: Path, rotate_mb: float, fsync: FsyncPolicy = "none",
        replica: str | None = None,
    ) -> None:
        self._directory = directory
        self._rotate_bytes = int(rotate_mb * 1024 * 1024)
        self._sync = fsync == "every_line"
        self._replica = replica_name(replica or Pod.current().replica)
        self._fd: int | None = None
        self._path: Path | None = None
        self._seq: int | None = None
        self._written = 0
        self._failing = False
        self.records_written = 0
        self.on_closed: Callable[[Path], None] | None = None
        """Told each file this writer closes, by its closed name (the uploader's queue)."""

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def replica(self) -> str:
        """This writer's replica, as its file names spell it."""
        return self._replica

    @property
    def current_path(self) -> Path | None:
        """The file being written (its name ends in ``.open``)."""
        return self._path

    def start(self) -> None:
        """Create the directory and close what a crashed run of this replica left open."""
        self._directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(self._directory.glob(f"journal-{self._replica}-*.jsonl{OPEN_SUFFIX}")):
            closed = _closed_name(path)
            if path.stat().st_size == 0:
                path.unlink()
                continue
            path.rename(closed)
            log.info("journal file left open by a previous run closed", path=str(closed))

    def append(self, record: JournalRecord) -> None:
        """Write the line now. A write error (disk full...) is logged, never raised: the
        message is already settled, and the delivery must not fail for its record."""
        # A lone surrogate (only possible inside a JSON string) becomes its \uXXXX escape.
        data = (record.to_json() + "\n").encode("utf-8", "backslashreplace")
        try:
            if self._fd is None or self._written >= self._rotate_bytes:
                self._rotate()
            assert self._fd is not None
            _write_all(self._fd, data)
            if self._sync:
                os.fdatasync(self._fd)
        except OSError as exc:
            if not self._failing:  # once per failing stretch, not once per line
                log.error("journal write failed", path=str(self._path), error=str(exc))
            self._failing = True
            return
        self._failing = False
        self._written += len(data)
        self.records_written += 1

    async def close(self) -> None:
        self._close_current()

    def _close_current(self) -> None:
        """Close the file and rename it to its closed name (``.jsonl``): it is complete."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        if self._path is not None:
            closed = _closed_name(self._path)
            try:
                self._path.rename(closed)
            except OSError as exc:  # the next start closes it
                log.error("journal file not closed", path=str(self._path), error=str(exc))
                return
            if self.on_closed is not None:
                self.on_closed(closed)

    def _rotate(self) -> None:
        self._close_current()
        if self._seq is None:
            self._seq = self._last_seq()
        while True:  # O_EXCL: a name already taken (another process) is skipped
            self._seq += 1
            path = self._directory / f"journal-{self._replica}-{self._seq:06d}.jsonl{OPEN_SUFFIX}"
            if _closed_name(path).exists():
                continue
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
            try:
                self._fd = os.open(path, flags, 0o644)
            except FileExistsError:
                continue
            break
        self._path = path
        self._written = 0

    def _last_seq(self) -> int:
        """The highest sequence of this replica's files in the directory, or the one the
        uploader noted for files it removed (0: none)."""
        pattern = re.compile(rf"journal-{re.escape(self._replica)}-(\d+)\.jsonl")
        seqs = [int(m.group(1)) for p in self._directory.glob(f"journal-{self._replica}-*")
                if (m := pattern.match(p.name))]
        return max(*seqs, last_seq_noted(self._directory, self._replica), 0)


def _seq_note(directory: Path, replica: str) -> Path:
    return directory / f".journal-{replica}.last"


def last_seq_noted(directory: Path, replica: str) -> int:
    """The sequence ``remember_last_seq`` noted for ``replica`` (0: none, or unreadable)."""
    try:
        return int(_seq_note(directory, replica).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def remember_last_seq(directory: Path, replica: str, seq: int) -> None:
    """Note that files of ``replica`` up to ``seq`` existed (before removing one): written
    to a temporary name and renamed, so a crash leaves the old note or the new one."""
    if seq <= last_seq_noted(directory, replica):
        return
    note = _seq_note(directory, replica)
    partial = note.with_name(note.name + ".tmp")
    partial.write_text(f"{seq}\n")
    partial.replace(note)


def replica_name(name: str) -> str:
    """A host name as a file-name part: letters, digits, ``.`` and ``_``; other characters
    (``-`` separates the name's parts) become ``_``."""
    return re.sub(r"[^A-Za-z0-9._]", "_", name) or "replica"


def _closed_name(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(OPEN_SUFFIX))


def _write_all(fd: int, data: bytes) -> None:
    """One ``write`` in practice (regular files take it whole); loop for a short write."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
