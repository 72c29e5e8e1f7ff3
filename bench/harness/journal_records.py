"""Journal records as Spark columns: the generated journals the report benchmarks read.

Three priorities over the span, a realistic outcome mix and ~10 % second attempts, every
journal field (checked against ``JOURNAL_FIELDS``), so a generated file reads as a real one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from priority_pubsub.telemetry.journal import JOURNAL_FIELDS, SCHEMA_VERSION

if TYPE_CHECKING:
    from pyspark.sql import Column

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
DAY_MS = 86_400_000


def record_columns(
    n: int, start_ms: int = T0, span_ms: int = DAY_MS, first_id: int = 0
) -> dict[str, Column]:
    """One expression per journal field, keyed by name (checked against JOURNAL_FIELDS):
    record ``id`` (from ``first_id``, ``n`` of them) enqueued evenly over the span."""
    from pyspark.sql import functions as F

    i = F.col("id")
    h = F.abs(F.xxhash64(i))
    priority = (i % 3).cast("int")
    retried = (h % 10) == 0
    roll = (h / 7 % 100).cast("int")
    enqueued = F.lit(start_ms) + ((i - first_id) * span_ms / n).cast("long")
    wait = (h % 5_000 + 1) * (priority + 1) * (priority + 1)
    received = enqueued + wait + F.when(retried, 30_000).otherwise(0)
    proc = h / 13 % 60_000 + 50
    outcome = (
        F.when(roll < 88, "ack").when(roll < 95, "retry").when(roll < 98, "dead").otherwise("drop")
    )
    reason = (
        F.when(outcome == "dead", "fatal status 422")
        .when(outcome == "drop", "app returned 404")
        .when(outcome == "retry", "status 503")
    )
    columns = {
        "v": F.lit(SCHEMA_VERSION),
        "message_id": F.concat(F.lit("m-"), i.cast("string")),
        "queue": F.element_at(F.array(*map(F.lit, ("high", "normal", "low"))), priority + 1),
        "priority": priority,
        "driver": F.lit("sqs"),
        "attempt": F.when(retried, 2).otherwise(1),
        "enqueued_ms": enqueued,
        "received_ms": received,
        "forwarded_ms": received + 3,
        "settled_ms": (received + 3 + proc).cast("long"),
        "outcome": outcome,
        "http_status": F.when(outcome == "ack", 200).when(outcome == "dead", 422),
        "reason": reason,
        "bytes": (h % 4096 + 64),
        "promoted_after_s": F.lit(None).cast("double"),
    }
    assert set(columns) == {f.name for f in JOURNAL_FIELDS}
    return columns
