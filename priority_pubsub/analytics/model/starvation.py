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
are served. The report gives, per ``p``, the longest such window (the earliest of equally
long ones), the number of higher-priority deliveries inside it, and how many windows there
were.

Retry deliveries of ``p`` are left out of the backlog (the journal does not record when a
retried message became visible again); retry deliveries of higher priorities count as
serving them. Instants are epoch ms; ties order enqueue, then higher-priority receive, then
``p`` receive, so a higher-priority delivery at the same millisecond as ``r`` counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from priority_pubsub.analytics.spark.frames import small_frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

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


def _events(derived: DataFrame, lower: list[int], priorities: list[int]) -> DataFrame:
    """Per target priority: its enqueues and receives, plus every higher-priority receive.

    One pass over the records: each record yields exactly its events (an array chosen by its
    priority and whether it is a first delivery, exploded), where building the three kinds
    apart read every record three times (one scan of the cache each) and joined the higher
    receives to the targets."""
    from pyspark.sql import functions as F

    def event(target: int, t: Column, kind: int, delta: int) -> Column:
        return F.struct(
            F.lit(target).cast("int").alias("target"),
            t.cast("long").alias("t"),
            F.lit(kind).alias("kind"),
            F.lit(delta).alias("delta"),
        )

    enq_ms = F.least(F.col("enqueued_ms"), F.col("received_ms"))  # clock skew: never after
    received = F.col("received_ms")

    def events_of(priority: int, first: bool) -> list[Column]:
        own = (
            [event(priority, enq_ms, _ENQ, 1), event(priority, received, _RECEIVE, -1)]
            if first and priority in lower
            else []
        )
        return own + [event(t, received, _HIGHER, 0) for t in lower if priority < t]

    empty = F.array().cast("array<struct<target:int,t:bigint,kind:int,delta:int>>")
    priority, first = F.col("priority"), F.col("attempt") == 1
    chosen: Column | None = None
    for p in sorted(set(priorities)):
        for condition, is_first in (((priority == p) & first, True), (priority == p, False)):
            own = events_of(p, is_first)
            arr = F.array(*own) if own else empty
            chosen = F.when(condition, arr) if chosen is None else chosen.when(condition, arr)
    # a priority not in ``priorities``: its events from every target's conditions
    generic = [
        F.when(first & (priority == t), event(t, enq_ms, _ENQ, 1)) for t in lower
    ] + [F.when(first & (priority == t), event(t, received, _RECEIVE, -1)) for t in lower] + [
        F.when(priority < t, event(t, received, _HIGHER, 0)) for t in lower
    ]
    fallback = F.filter(F.array(*generic), lambda e: e.isNotNull())
    every = fallback if chosen is None else chosen.otherwise(fallback)
    return derived.select(F.inline(every))


STARVATION_BUCKET_MS = 60_000
COUNTS_SCHEMA = "target int, bucket bigint, net bigint, higher_n bigint"
"""``minute_counts``' columns."""
MINUTES_SCHEMA = (
    "target int, bucket bigint, windows bigint, longest struct<duration_ms: bigint, "
    "neg_start_ms: bigint, end_ms: bigint, higher: bigint>, last_t bigint, "
    "last_higher bigint, open_t bigint, open_higher bigint"
)
"""``per_minute``'s columns."""


def _bucket(column: Column) -> Column:
    from pyspark.sql import functions as F

    return F.floor(column / STARVATION_BUCKET_MS)


def minute_counts(
    derived: DataFrame, targets: DataFrame, lowest_target: int, from_ms: int | None = None
) -> DataFrame:
    """Per (target, minute): the net backlog change and the higher-priority receives in it.

    Counted from the records, not from the events: each record gives its enqueue minute and
    its receive minute (one cheap aggregation per (priority, minute)); each target then sums
    its own net backlog and every higher priority's receives (a small frame). (Counting them
    from the events made Spark build the events once more for each use of this frame.)
    ``from_ms`` (a minute boundary): only the minutes from there on."""
    from pyspark.sql import functions as F

    first = ((F.col("attempt") == 1) & (F.col("priority") >= lowest_target)).cast("long")
    zero, one = F.lit(0).cast("long"), F.lit(1).cast("long")
    enq_ms = F.least(F.col("enqueued_ms"), F.col("received_ms"))
    sides = F.array(
        F.struct(_bucket(enq_ms).alias("bucket"), first.alias("e"), zero.alias("r"),
                 zero.alias("h")),
        F.struct(_bucket(F.col("received_ms")).alias("bucket"), zero.alias("e"),
                 first.alias("r"), one.alias("h")),
    )  # fmt: skip
    sided = derived.select("priority", F.explode(sides).alias("s"))
    if from_ms is not None:
        sided = sided.where(F.col("s.bucket") >= from_ms // STARVATION_BUCKET_MS)
    per_priority = sided.groupBy("priority", F.col("s.bucket").alias("bucket")).agg(
        F.sum("s.e").alias("e"), F.sum("s.r").alias("r"), F.sum("s.h").alias("h")
    )
    own = F.col("priority") == F.col("target")
    return (
        per_priority.join(F.broadcast(targets), F.col("priority") <= F.col("target"))
        .groupBy("target", "bucket")
        .agg(
            F.sum(F.when(own, F.col("e") - F.col("r")).otherwise(0)).alias("net"),
            F.sum(F.when(~own, F.col("h")).otherwise(0)).alias("higher_n"),
        )
    )


def minute_starts(counts: DataFrame) -> DataFrame:
    """Per (target, minute): the backlog and the higher-priority count the minute starts
    from, a running sum over the minutes before (``minute_counts`` of every minute)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    before = (
        Window.partitionBy("target").orderBy("bucket").rowsBetween(Window.unboundedPreceding, -1)
    )
    return counts.select(
        "target",
        "bucket",
        F.coalesce(F.sum("net").over(before), F.lit(0)).alias("backlog0"),
        F.coalesce(F.sum("higher_n").over(before), F.lit(0)).alias("higher0"),
    )


def _window(duration: Column, start: Column, end: Column, higher: Column) -> Column:
    """A window as a struct that orders longest first, then earliest (``max`` picks it)."""
    from pyspark.sql import functions as F

    return F.struct(
        duration.cast("long").alias("duration_ms"),
        (-start).cast("long").alias("neg_start_ms"),
        end.cast("long").alias("end_ms"),
        higher.cast("long").alias("higher"),
    )


def per_minute(events: DataFrame, starts: DataFrame) -> DataFrame:
    """One sort of the events by (target, minute, t, kind) and one pass over it, summed per
    (target, minute): the windows that start and end inside the minute (count, longest),
    the minute's last anchor, and its first receive when no anchor precedes it inside the
    minute (that window starts in an earlier minute: ``starvation_rows`` completes it).

    Running values start from ``starts``, so no task holds more than one minute of one
    target (one window over all of a target's events ran out of memory at 10 M records).

    Every receive is an anchor, so only the anchors matter after the running counts: they
    are kept (about a third of the events: no higher-priority receive, no enqueue to a
    waiting backlog) and each looks back at the anchor just before it (``lag``, in the order
    the running counts already sorted them: no second sort). That is "the last anchor
    before" because the anchors' times and higher counts never decrease. (A running ``max``
    over every earlier event gave the same values in a third window pass over all of them,
    the step's largest cost.)"""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = events.withColumn("bucket", _bucket(F.col("t")))
    anchors = _marked(events.join(starts, ["target", "bucket"])).where(
        F.col("anchor_t").isNotNull()
    )
    before = Window.partitionBy("target", "bucket").orderBy("t", "kind")
    points = anchors.select(
        "*",
        F.lag("t").over(before).alias("prev_t"),
        F.lag("higher_seen").over(before).alias("prev_higher"),
    )
    receive = F.col("kind") == _RECEIVE
    higher = F.col("higher_seen") - F.col("prev_higher")
    counted = receive & F.col("prev_t").isNotNull() & (higher > 0)
    opening = receive & F.col("prev_t").isNull()
    longest = _window(F.col("t") - F.col("prev_t"), F.col("prev_t"), F.col("t"), higher)
    return points.groupBy("target", "bucket").agg(
        F.sum(counted.cast("long")).alias("windows"),
        F.max(F.when(counted, longest)).alias("longest"),
        F.max("anchor_t").alias("last_t"),
        F.max("anchor_higher").alias("last_higher"),
        F.min(F.when(opening, F.col("t"))).alias("open_t"),
        F.max(F.when(opening, F.col("higher_seen"))).alias("open_higher"),
    )


def starvation_rows(minutes: DataFrame) -> DataFrame:
    """Per target: windows counted and the longest (``w``), from ``per_minute`` rows (or
    their ``fold_minutes`` by hour) of every minute (a small frame: one row per minute)."""
    from pyspark.sql import functions as F

    return fold_minutes(minutes).select("target", "windows", F.col("longest").alias("w"))


def fold_minutes(minutes: DataFrame, *within: str) -> DataFrame:
    """``per_minute`` rows folded into one row per target (and ``within`` columns) of the
    same shape: each minute's opening receive completed with the last anchor of the minutes
    before it in the group, the windows summed, the longest kept; the group's opening
    receive is the one no minute before it in the group completes.

    Why. The rows of consecutive minutes fold like one longer minute (only the first minute
    with an anchor can open a window that starts before it: every later minute's opening
    receive has an anchor before it in the group), so the fold of a fold is the fold of the
    minutes. The incremental state keeps one row per hour (``HOUR_MINUTES``), not sixty."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    before = (
        Window.partitionBy("target", *within)
        .orderBy("bucket")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    carried = minutes.withColumn("carry_t", F.max("last_t").over(before)).withColumn(
        "carry_higher", F.max("last_higher").over(before)
    )
    higher = F.col("open_higher") - F.col("carry_higher")
    completed = F.col("open_t").isNotNull() & F.col("carry_t").isNotNull() & (higher > 0)
    opened = _window(F.col("open_t") - F.col("carry_t"), F.col("carry_t"), F.col("open_t"), higher)
    uncarried = F.col("carry_t").isNull()
    return carried.groupBy("target", *within).agg(
        (F.sum("windows") + F.sum(completed.cast("long"))).alias("windows"),
        F.max(F.greatest(F.col("longest"), F.when(completed, opened))).alias("longest"),
        F.max("last_t").alias("last_t"),
        F.max("last_higher").alias("last_higher"),
        F.min(F.when(uncarried, F.col("open_t"))).alias("open_t"),
        F.max(F.when(uncarried, F.col("open_higher"))).alias("open_higher"),
    )


HOUR_MINUTES = 60


def by_hour(minutes: DataFrame, fold: Callable[[DataFrame, str], DataFrame]) -> DataFrame:
    """Per-minute rows (``bucket``: epoch minutes) folded by ``fold`` into one row per hour,
    whose ``bucket`` is the hour's first minute: they sort, sum and fold among minute rows
    as the minutes they stand for."""
    from pyspark.sql import functions as F

    hour = F.floor(F.col("bucket") / HOUR_MINUTES) * HOUR_MINUTES
    folded = fold(minutes.withColumn("hour_bucket", hour), "hour_bucket")
    return folded.withColumnRenamed("hour_bucket", "bucket")


def fold_counts(counts: DataFrame, *within: str) -> DataFrame:
    """``minute_counts`` rows summed per target (and ``within`` columns)."""
    from pyspark.sql import functions as F

    return counts.groupBy("target", *within).agg(
        F.sum("net").alias("net"), F.sum("higher_n").alias("higher_n")
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
    running = events.select(  # one select: both running sums in one window pass
        "*",
        (F.col("backlog0") + F.sum("delta").over(upto)).alias("backlog"),
        (F.col("higher0") + F.sum((F.col("kind") == _HIGHER).cast("long")).over(upto)).alias(
            "higher_seen"
        ),
    )
    starts = (F.col("kind") == _ENQ) & (F.col("backlog") == 1)
    is_anchor = starts | (F.col("kind") == _RECEIVE)
    return running.withColumn("anchor_t", F.when(is_anchor, F.col("t"))).withColumn(
        "anchor_higher", F.when(is_anchor, F.col("higher_seen"))
    )


def targets_of(spark: SparkSession, priorities: list[int]) -> tuple[list[int], DataFrame]:
    """The priorities that can starve (all but the highest) and them as a small frame."""
    lower = sorted(set(priorities))[1:]
    return lower, small_frame(spark, [{"target": p} for p in lower], "target int")


def starvation(
    spark: SparkSession, derived: DataFrame, priorities: list[int] | None = None
) -> DataFrame:
    """One row per lower priority: its longest starvation window (see module docstring).

    ``priorities`` present in ``derived`` may be passed when already known (saves a job)."""
    if priorities is None:
        priorities = [r[0] for r in derived.select("priority").distinct().collect()]
    _, minutes = starvation_minutes(spark, derived, priorities)
    return from_minutes(spark, priorities, minutes)


def starvation_minutes(
    spark: SparkSession,
    derived: DataFrame,
    priorities: list[int],
    from_ms: int | None = None,
    earlier_counts: DataFrame | None = None,
    earlier_minutes: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame]:
    """(``minute_counts``, ``per_minute``) rows of every minute: those from ``from_ms`` on
    computed from ``derived`` (which must hold every record with an event from there on),
    the earlier ones taken from ``earlier_*`` (a previous run's rows, per minute or folded
    by hour (``by_hour``) when ``from_ms`` starts an hour: an earlier minute's rows depend
    only on earlier events). Each minute's start values are running sums over
    all the minutes' counts, so a run reads only the records from ``from_ms`` on."""
    from pyspark.sql import functions as F

    lower, targets = targets_of(spark, priorities)
    if not lower:  # one priority: nothing can starve (the frames keep their columns)
        return small_frame(spark, [], COUNTS_SCHEMA), small_frame(spark, [], MINUTES_SCHEMA)
    counts = minute_counts(derived, targets, lower[0], from_ms)
    events = _events(derived, lower, priorities)
    if from_ms is not None:
        events = events.where(F.col("t") >= from_ms)
        first_bucket = from_ms // STARVATION_BUCKET_MS
        if earlier_counts is not None:
            counts = earlier_counts.where(F.col("bucket") < first_bucket).unionByName(counts)
    starts = minute_starts(counts)
    if from_ms is not None:
        starts = starts.where(F.col("bucket") >= from_ms // STARVATION_BUCKET_MS)
    minutes = per_minute(events, starts)
    if from_ms is not None and earlier_minutes is not None:
        kept = earlier_minutes.where(F.col("bucket") < from_ms // STARVATION_BUCKET_MS)
        minutes = kept.unionByName(minutes)
    return counts, minutes


def from_minutes(spark: SparkSession, priorities: list[int], minutes: DataFrame) -> DataFrame:
    """The result table from ``per_minute`` rows of every minute (a small frame)."""
    from pyspark.sql import functions as F

    lower, targets = targets_of(spark, priorities)
    if not lower:
        return small_frame(spark, [], RESULT_SCHEMA)
    worst = starvation_rows(minutes)
    return targets.join(worst, "target", "left").select(
        F.col("target").alias("priority"),
        F.coalesce(F.col("windows"), F.lit(0)).alias("windows"),
        (-F.col("w.neg_start_ms")).alias("window_start_ms"),
        F.col("w.end_ms").alias("window_end_ms"),
        (F.coalesce(F.col("w.duration_ms"), F.lit(0)) / 1000.0).alias("duration_s"),
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
