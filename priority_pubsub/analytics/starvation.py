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


STARVATION_BUCKET_MS = 60_000


def _windows(events: DataFrame) -> DataFrame:
    """Every receive of a target priority with its previous anchor and the higher count.

    The running sums (backlog, higher-priority receives) and "the last anchor before" are
    computed in two levels, so no task holds more than one minute of one target: first per
    minute (a small frame), what the minute starts from (backlog, higher count, the last
    anchor of the minutes before); then within each minute, partitioned by (target, minute).
    One window over all of a target's events put them all in one task: at 10 M records it
    ran out of memory."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    higher = (F.col("kind") == _HIGHER).cast("long")
    events = events.withColumn("bucket", F.floor(F.col("t") / STARVATION_BUCKET_MS))
    minutes = events.groupBy("target", "bucket").agg(
        F.sum("delta").alias("net"), F.sum(higher).alias("higher_n")
    )
    before_minute = (
        Window.partitionBy("target").orderBy("bucket").rowsBetween(Window.unboundedPreceding, -1)
    )
    starts = minutes.select(
        "target",
        "bucket",
        F.coalesce(F.sum("net").over(before_minute), F.lit(0)).alias("backlog0"),
        F.coalesce(F.sum("higher_n").over(before_minute), F.lit(0)).alias("higher0"),
    )
    marked = _marked(events.join(starts, ["target", "bucket"]))
    order = F.col("t") * 4 + F.col("kind")  # (t, kind) as one long: kind is 0..2
    anchors = (
        marked.where(F.col("anchor_t").isNotNull())
        .groupBy("target", "bucket")
        .agg(
            F.max_by("anchor_t", order).alias("last_t"),
            F.max_by("anchor_higher", order).alias("last_higher"),
        )
    )
    carried = (
        minutes.select("target", "bucket")
        .join(anchors, ["target", "bucket"], "left")
        .select(
            "target",
            "bucket",
            F.last("last_t", ignorenulls=True).over(before_minute).alias("carry_t"),
            F.last("last_higher", ignorenulls=True).over(before_minute).alias("carry_higher"),
        )
    )
    inside_before = (
        Window.partitionBy("target", "bucket")
        .orderBy("t", "kind")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    receives = (
        marked.withColumn("prev_t", F.last("anchor_t", ignorenulls=True).over(inside_before))
        .withColumn("prev_higher", F.last("anchor_higher", ignorenulls=True).over(inside_before))
        .where(F.col("kind") == _RECEIVE)
        .join(carried, ["target", "bucket"])
    )
    prev_higher = F.coalesce(F.col("prev_higher"), F.col("carry_higher"))
    return receives.select(
        "target",
        F.coalesce(F.col("prev_t"), F.col("carry_t")).alias("start_ms"),
        F.col("t").alias("end_ms"),
        (F.col("higher_seen") - prev_higher).alias("higher"),
    )


def _marked(events: DataFrame) -> DataFrame:
    """Events with the running backlog and higher count (from their minute's start values),
    and, on anchors, the anchor's time and higher count."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    upto = (
        Window.partitionBy("target", "bucket")
        .orderBy("t", "kind")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    running = events.withColumn(
        "backlog", F.col("backlog0") + F.sum("delta").over(upto)
    ).withColumn(
        "higher_seen",
        F.col("higher0") + F.sum((F.col("kind") == _HIGHER).cast("long")).over(upto),
    )
    starts = (F.col("kind") == _ENQ) & (F.col("backlog") == 1)
    is_anchor = starts | (F.col("kind") == _RECEIVE)
    return running.withColumn("anchor_t", F.when(is_anchor, F.col("t"))).withColumn(
        "anchor_higher", F.when(is_anchor, F.col("higher_seen"))
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
