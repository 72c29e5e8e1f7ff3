"""Where a closed journal file goes: ``<prefix>/date=YYYY-MM-DD/hour=HH/<name>[.gz]``.

A pure function of the file: its name and its first record's settle time (UTC). The name is
unique per replica (``journal-<replica>-<seq>.jsonl``, the sequence never reused), so a
retried or repeated upload writes the same key, never a second object. The date and hour
are a partition a reader can prune by (``date=*/hour=*`` in Hive's layout, as Spark and
most query engines read it); a file whose first line cannot be read (cut by a crash of the
machine) goes to ``date=unknown/hour=unknown`` rather than nowhere.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from priority_pubsub.telemetry.journal import UPLOADED_SUFFIX

GZIP_SUFFIX = ".gz"
FIRST_LINE_MAX = 64 * 1024
"""A journal line is far shorter; a longer first line is no record."""


def first_settled_ms(path: Path) -> int | None:
    """The ``settled_ms`` of the file's first line, None when it is not a record."""
    with path.open("rb") as handle:
        line = handle.readline(FIRST_LINE_MAX)
    try:
        value = json.loads(line)
    except ValueError:
        return None
    settled = value.get("settled_ms") if isinstance(value, dict) else None
    return settled if isinstance(settled, int) and not isinstance(settled, bool) else None


def partition(settled_ms: int | None) -> str:
    if settled_ms is None:
        return "date=unknown/hour=unknown"
    when = datetime.fromtimestamp(settled_ms / 1000, UTC)
    return f"date={when:%Y-%m-%d}/hour={when:%H}"


def object_name(path: Path, gzip: bool) -> str:
    """The object's base name: the closed file's name (a kept copy's suffix dropped)."""
    name = path.name.removesuffix(UPLOADED_SUFFIX)
    return name + GZIP_SUFFIX if gzip else name


def object_key(prefix: str, path: Path, gzip: bool) -> str:
    """The key of ``path`` under ``prefix`` (no leading or trailing slash)."""
    parts = [prefix.strip("/"), partition(first_settled_ms(path)), object_name(path, gzip)]
    return "/".join(p for p in parts if p)
