"""The queue file's layout (created, upgraded, or refused when newer) and the statements
that claim and release rows, shared by the consumer (``driver``) and the monitor's abilities
(``monitoring``)."""

from __future__ import annotations

import sqlite3

from priority_pubsub.core.errors import DriverError

__all__ = [
    "CLAIM", "CLAIMED", "MIGRATIONS", "RELEASE", "SCHEMA", "SCHEMA_VERSION", "NewerSchema",
    "open_schema",
]

SCHEMA = """
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
number. A later layout adds a step to ``MIGRATIONS``; a file of a version above this one was
written by a newer release and is refused, never rewritten (an older release writing rows a
newer one reads differently is how a queue gets mangled)."""
MIGRATIONS: dict[int, str] = {0: ""}
"""From version N to N + 1: the SQL to run (0 -> 1: the layout is unchanged)."""


CLAIM = "UPDATE messages SET attempts = attempts + 1, lease_token = ?, visible_at_ms = ? "
CLAIMED = "RETURNING seq, id, body, attributes, content_type, enqueued_ms, attempts"

RELEASE = (
    "UPDATE messages SET visible_at_ms = ?, lease_token = NULL, "
    "attempts = max(attempts - 1, 0) WHERE seq = ?"
)
"""Return a claimed row as if it had not been claimed (its attempt count undone)."""


def open_schema(conn: sqlite3.Connection) -> None:
    """Create or upgrade the layout inside the worker's transaction; refuse a newer file."""
    found = conn.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise NewerSchema(
            f"local queue file has schema version {found}, newer than this release's "
            f"{SCHEMA_VERSION}: written by a newer priority-pubsub; upgrade this one (or point "
            "driver.path at another file); the file was left untouched"
        )
    if not has_messages_table(conn):  # a new file: today's layout
        run_script(conn, SCHEMA)
    else:
        for version in range(found, SCHEMA_VERSION):
            run_script(conn, MIGRATIONS[version])
    if found != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Statement by statement: ``executescript`` would commit the worker's transaction."""
    for statement in filter(str.strip, script.split(";")):
        conn.execute(statement)


def has_messages_table(conn: sqlite3.Connection) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
    ).fetchone() is not None


class NewerSchema(DriverError):
    """The queue file was written by a newer release: retrying cannot help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)
