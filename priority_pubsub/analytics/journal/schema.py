"""The Spark schema of the journal, derived from ``telemetry.journal.JOURNAL_FIELDS``.

The journal's fields are declared once, in ``journal.py``; this module only maps their types
to Spark types and adds the column Spark fills with lines it cannot parse. The report refers
to a few fields by name in its expressions; ``require_fields`` checks those names against the
schema at import time, so a renamed field fails loudly here instead of producing empty tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from priority_pubsub.core.outcome import FINAL_KINDS, Kind
from priority_pubsub.telemetry.journal import JOURNAL_FIELDS, READABLE_VERSIONS, SCHEMA_VERSION
from priority_pubsub.telemetry.journal import OUTCOMES as RECORD_OUTCOMES

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

CORRUPT_COLUMN = "_corrupt_record"
OUTCOMES = tuple(o for o in RECORD_OUTCOMES if o != Kind.RELEASE)
"""Outcomes of a delivery: the report's columns. A ``release`` record is no delivery (the
app never saw the message); such records are counted apart (``LineCounts.released``)."""
FINAL_OUTCOMES = tuple(o for o in OUTCOMES if o in FINAL_KINDS)
"""Outcomes after which the broker no longer holds the message (not retry, not a failed
settle: the broker delivers those again)."""

__all__ = [
    "CORRUPT_COLUMN",
    "FINAL_OUTCOMES",
    "OUTCOMES",
    "READABLE_VERSIONS",
    "RECORD_OUTCOMES",
    "REPORT_FIELDS",
    "SCHEMA_VERSION",
    "journal_struct",
    "require_fields",
    "required_field_names",
]


def require_fields(*names: str) -> None:
    """Fail at import time if the report uses a field the journal schema does not define."""
    known = {f.name for f in JOURNAL_FIELDS}
    missing = [n for n in names if n not in known]
    if missing:
        raise RuntimeError(f"journal schema v{SCHEMA_VERSION} has no field(s) {missing}")


REPORT_FIELDS = (
    "message_id", "queue", "priority", "attempt", "enqueued_ms", "received_ms",
    "forwarded_ms", "settled_ms", "outcome", "reason", "bytes", "slots",
)  # fmt: skip
"""The fields the report's tables read: the only ones kept in the cached frame."""
# the fields the report's expressions name (the rest are parsed for validation only)
require_fields("v", *REPORT_FIELDS)


def required_field_names() -> list[str]:
    """Fields a valid record must carry (non-nullable in the schema)."""
    return [f.name for f in JOURNAL_FIELDS if not f.nullable]


def journal_struct(with_corrupt_column: bool = True) -> StructType:
    """The explicit read schema: every journal field plus, optionally, the corrupt-line column."""
    from pyspark.sql import types as T

    spark_types: dict[str, Any] = {
        "int": T.IntegerType(),
        "long": T.LongType(),
        "double": T.DoubleType(),
        "string": T.StringType(),
    }
    fields = [T.StructField(f.name, spark_types[f.type], nullable=True) for f in JOURNAL_FIELDS]
    if with_corrupt_column:
        fields.append(T.StructField(CORRUPT_COLUMN, T.StringType(), nullable=True))
    return T.StructType(fields)
