"""Starvation: how long a lower priority went unserved while higher priorities were served.

Definition. Take one priority ``p`` that has a higher priority (a smaller number) in the
journal. Each first delivery of a ``p`` message means the message *waited* from
``enqueued_ms`` to ``received_ms``; the ``p`` *backlog* at instant t is the number of ``p``
messages waiting at t. An *anchor* of ``p`` is an instant where ``p`` was served (a ``p``
first delivery was received) or where its backlog went from 0 to 1. A *starvation window*
of ``p`` is the interval ``[a, r]`` from an anchor ``a`` to the next ``p`` receive ``r``
such that at least one message of a higher priority was received in ``[a, r]``. Throughout
such a window the backlog is non-empty and nothing of ``p`` is taken, so ``p``'s oldest
waiting message (whichever it is) ages by exactly ``r - a`` while only higher priorities
are served. The report gives, per ``p``, the longest such window, the number of
higher-priority deliveries inside it, and how many windows there were.

Retry deliveries of ``p`` are left out of the backlog (the journal does not record when a
retried message became visible again); retry deliveries of higher priorities count as
serving them. Instants are epoch ms; ties order enqueue, then higher-priority receive, then
``p`` receive, so a higher-priority delivery at the same millisecond as ``r`` counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_ENQ, _HIGHER, _RECEIVE = 0, 1, 2
RESULT_SCHEMA = (
    "priority int, windows long, window_start_ms long, window_end_ms long, duration_s double, "
    "higher_priority_deliveries long"
)


@dataclass(frozen=True)
class StarvationRow:
    """The worst starvation window of one priority (all None/0 when it never starved)."""

    priority: int
    windows: int
    window_start_ms: int | None
    window_end_ms: int | None
    duration_s: float
    higher_priority_deliveries: int


def _events(derived: DataFrame, targets: DataFrame, lowest_target: int) -> DataFrame:
    """Per target priority: its enqueues and receives, plus every higher-priority receive."""
    from pyspark.sql import functions as F

    first = derived.where((F.col("attempt") == 1) & (F.col("priority") >= lowest_target))
    enq_ms = F.least(F.col("enqueued_ms"), F.col("received_ms"))  # clock skew: never after
    own = first.select(F.col("priority").alias("target"), enq_ms.alias("t"))
    enqueues = own.select("target", "t", F.lit(_ENQ).alias("kind"), F.lit(1).alias("delta"))
    receives = first.select(
        F.col("priority").alias("target"),
        F.col("received_ms").alias("t"),
        F.lit(_RECEIVE).alias("kind"),
        F.lit(-1).alias("delta"),
    )
    higher = (
        derived.select(F.col("priority").alias("src"), F.col("received_ms").alias("t"))
        .join(F.broadcast(targets), F.col("src") < F.col("target"))
        .select("target", "t", F.lit(_HIGHER).alias("kind"), F.lit(0).alias("delta"))
    )
    return enqueues.unionByName(receives).unionByName(higher)


def _windows(events: DataFrame) -> DataFrame:
    """Every receive of a target priority with its previous anchor and the higher count."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = Window.partitionBy("target").orderBy("t", "kind")
    upto = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = ordered.rowsBetween(Window.unboundedPreceding, -1)
    running = events.withColumn("backlog", F.sum("delta").over(upto)).withColumn(
        "higher_seen", F.sum((F.col("kind") == _HIGHER).cast("long")).over(upto)
    )
    starts = (F.col("kind") == _ENQ) & (F.col("backlog") == 1)
    is_anchor = starts | (F.col("kind") == _RECEIVE)
    marked = running.withColumn("anchor_t", F.when(is_anchor, F.col("t"))).withColumn(
        "anchor_higher", F.when(is_anchor, F.col("higher_seen"))
    )
    with_prev = marked.withColumn(
        "prev_t", F.last("anchor_t", ignorenulls=True).over(before)
    ).withColumn("prev_higher", F.last("anchor_higher", ignorenulls=True).over(before))
    return with_prev.where(F.col("kind") == _RECEIVE).select(
        "target",
        F.col("prev_t").alias("start_ms"),
        F.col("t").alias("end_ms"),
        (F.col("higher_seen") - F.col("prev_higher")).alias("higher"),
    )


def starvation(
    spark: SparkSession, derived: DataFrame, priorities: list[int] | None = None
) -> DataFrame:
    """One row per lower priority: its longest starvation window (see module docstring).

    ``priorities`` present in ``derived`` may be passed when already known (saves a job)."""
    from pyspark.sql import functions as F

    if priorities is None:
        priorities = [r[0] for r in derived.select("priority").distinct().collect()]
    lower = [(p,) for p in sorted(priorities)[1:]]
    schema = "target int"
    targets = spark.createDataFrame(lower, schema)
    if not lower:
        return spark.createDataFrame([], RESULT_SCHEMA)
    windows = _windows(_events(derived, targets, lower[0][0])).where(F.col("higher") > 0)
    windows = windows.withColumn("duration_ms", F.col("end_ms") - F.col("start_ms"))
    worst = windows.groupBy("target").agg(
        F.count("*").alias("windows"),
        F.max_by(F.struct("start_ms", "end_ms", "higher"), F.col("duration_ms")).alias("w"),
        F.max("duration_ms").alias("duration_ms"),
    )
    return targets.join(worst, "target", "left").select(
        F.col("target").alias("priority"),
        F.coalesce(F.col("windows"), F.lit(0)).alias("windows"),
        F.col("w.start_ms").alias("window_start_ms"),
        F.col("w.end_ms").alias("window_end_ms"),
        (F.coalesce(F.col("duration_ms"), F.lit(0)) / 1000.0).alias("duration_s"),
        F.coalesce(F.col("w.higher"), F.lit(0)).alias("higher_priority_deliveries"),
    )


def collect_rows(table: DataFrame) -> list[StarvationRow]:
    return [
        StarvationRow(
            priority=int(r["priority"]),
            windows=int(r["windows"]),
            window_start_ms=r["window_start_ms"],
            window_end_ms=r["window_end_ms"],
            duration_s=float(r["duration_s"]),
            higher_priority_deliveries=int(r["higher_priority_deliveries"]),
        )
        for r in sorted(table.collect(), key=lambda r: int(r["priority"]))
    ]
