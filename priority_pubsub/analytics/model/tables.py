"""The Parquet tables: per (queue, priority, hour) statistics and per-message lifecycle.

Definitions (also shown on the HTML page):
- an *attempt* is one journal record: one delivery of one message, settled once;
- *hour* is the UTC hour in which the attempt was settled;
- *wait* is ``received - enqueued`` of a message's first delivery (attempt 1): how long it
  sat in its queue before a worker took it. Later attempts are left out of wait on purpose:
  their ``received - enqueued`` includes the retry backoff the sidecar chose, which says
  nothing about priorities;
- *processing* is ``settled - forwarded``: the app's time on the attempt plus settling;
- a message is *completed* by its final outcome (ack, dead or drop); retry and
  settle_failed (the broker delivers it again) are not final; ``release`` records (handed
  back unseen) are no deliveries and are left out (``LineCounts.released``).
Percentiles use Spark's ``percentile_approx`` with accuracy ``PERCENTILE_ACCURACY``: the
returned value's rank is within ``n / PERCENTILE_ACCURACY`` of the exact rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from priority_pubsub.analytics.journal.schema import FINAL_OUTCOMES, OUTCOMES
from priority_pubsub.analytics.model.capacity import fine_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

PERCENTILES = (0.5, 0.95, 0.99)
PERCENTILE_ACCURACY = 10_000
KEYS = ("queue", "priority", "hour")
ATTEMPT_SLOTS = 1024
"""Attempt numbers that order a message's records settled in one millisecond."""


def with_derived(valid: DataFrame) -> DataFrame:
    """Add ``hour`` (UTC timestamp), ``wait_s`` (attempt 1 only) and ``proc_s``."""
    from pyspark.sql import functions as F

    wait_ms = F.when(F.col("attempt") == 1, F.col("received_ms") - F.col("enqueued_ms"))
    return (
        valid.withColumn("hour", F.date_trunc("hour", F.timestamp_millis(F.col("settled_ms"))))
        .withColumn("wait_s", wait_ms / 1000.0)
        .withColumn("proc_s", (F.col("settled_ms") - F.col("forwarded_ms")) / 1000.0)
    )


def percentile_columns(column: str, prefix: str) -> list[Column]:
    """p50/p95/p99 of ``column`` as ``{prefix}_p50_s`` ... (one approx sketch, three reads)."""
    from pyspark.sql import functions as F

    sketch = F.percentile_approx(F.col(column), list(PERCENTILES), PERCENTILE_ACCURACY)
    return [sketch[i].alias(f"{prefix}_p{round(p * 100)}_s") for i, p in enumerate(PERCENTILES)]


ROLLUP_KEYS = ("priority", "hour", "queue")


def fine_groups(derived: DataFrame) -> DataFrame:
    """Per (priority, hour, queue, attempt, outcome, dead-letter reason): the attempts (``n``),
    first deliveries, bytes, settle bounds and capacity's sums (``fine_columns``);
    ``reason`` only for dead and dropped attempts.

    One pass over the records serves four steps: ``rollup``'s counts, the attempts
    distribution, the dead letters and capacity's per-priority figures are sums of these
    few rows (each read the cached records on its own, a full scan each). The reason is
    kept only where the dead-letter table shows it, so the groups stay few whatever the
    retry reasons say."""
    from pyspark.sql import functions as F

    reason = F.when(
        F.col("outcome").isin(*DEAD_OUTCOMES), F.coalesce(F.col("reason"), F.lit(NO_REASON))
    )
    return derived.groupBy(*ROLLUP_KEYS, "attempt", "outcome", reason.alias("reason")).agg(
        F.count("*").alias("n"),
        F.count("wait_s").alias("first_deliveries"),
        F.sum("bytes").alias("bytes"),
        F.min("settled_ms").alias("first_settled_ms"),
        F.max("settled_ms").alias("last_settled_ms"),
        *fine_columns(),
    )


DEAD_OUTCOMES = ("dead", "drop")
NO_REASON = "(no reason given)"


def _count_of(column: Column) -> Column:
    """A sum of counts that is never null (as ``count`` is), for the tables' schemas."""
    from pyspark.sql import functions as F

    return F.coalesce(F.sum(column), F.lit(0).cast("long"))


def rollup(
    derived: DataFrame, fine: DataFrame | None = None, across_hours: bool = True
) -> DataFrame:
    """Every statistic at three levels: (priority, hour, queue), (priority, hour) and
    (priority), told apart by ``level`` (``LEVEL_*``); without ``across_hours`` only the
    first two (the per-hour rows an incremental run recomputes for the hours it touches).

    Two aggregations of the records, because a single one ran every aggregate interpreted:
    percentiles are sketches (Spark's object hash aggregate, no generated code), and one of
    them in an aggregation put the counts and sums beside them on that slow path too. So the
    counts, sums and bounds are summed from ``fine`` (``fine_groups``: one generated hash
    aggregation of the records, pass it when already computed) per (priority, hour, queue)
    and rolled up afterwards from those (small) rows; only the percentiles are aggregated from the
    records at each level (sketches cannot be merged after the fact; ``_sketches``). The two
    small results are joined on the level's keys."""
    from pyspark.sql import functions as F

    fine = fine_groups(derived) if fine is None else fine
    n, zero = F.col("n"), F.lit(0).cast("long")
    finest = fine.groupBy(*ROLLUP_KEYS).agg(
        _count_of(n).alias("attempts"),
        *(F.sum(F.when(F.col("outcome") == o, n).otherwise(zero)).alias(o) for o in OUTCOMES),
        F.sum(F.when(F.col("outcome").isin(*FINAL_OUTCOMES), n).otherwise(zero)).alias(
            "completed"
        ),
        _count_of(F.col("first_deliveries")).alias("first_deliveries"),
        F.sum("bytes").alias("bytes"),
        F.min("first_settled_ms").alias("first_settled_ms"),
        F.max("last_settled_ms").alias("last_settled_ms"),
    )
    counts = finest.rollup(*ROLLUP_KEYS).agg(
        *(F.sum(c).alias(c) for c in ("attempts", *OUTCOMES, "completed", "first_deliveries")),
        F.sum("bytes").alias("bytes"),
        F.concat_ws(", ", F.array_sort(F.collect_set("queue"))).alias("queues"),
        F.min("first_settled_ms").alias("first_settled_ms"),
        F.max("last_settled_ms").alias("last_settled_ms"),
        F.grouping_id().alias("level"),
    )
    if not across_hours:
        counts = counts.where(F.col("level") != LEVEL_PRIORITY)
    sketches = _sketches(derived, finest, across_hours).withColumnsRenamed(
        {k: f"_{k}" for k in (*ROLLUP_KEYS, "level")}
    )
    same_group = [counts[k].eqNullSafe(sketches[f"_{k}"]) for k in (*ROLLUP_KEYS, "level")]
    # an outcome's share of attempts: its count over attempts (the same double as avg of 0/1)
    rates = [
        (F.col(o).cast("double") / F.col("attempts").cast("double")).alias(f"{o}_rate")
        for o in OUTCOMES
    ]
    return (
        counts.where(F.col("priority").isNotNull())
        .join(sketches, same_group)
        .select(
            *ROLLUP_KEYS,
            "attempts",
            *OUTCOMES,
            "completed",
            *rates,
            "first_deliveries",
            *PERCENTILE_NAMES,
            "bytes",
            "queues",
            "first_settled_ms",
            "last_settled_ms",
            "level",
        )
    )


PERCENTILE_NAMES = tuple(f"{k}_p{round(p * 100)}_s" for k in ("wait", "proc") for p in PERCENTILES)


def _sketches(derived: DataFrame, finest: DataFrame, across_hours: bool = True) -> DataFrame:
    """The percentiles per (priority, hour, queue, level) of ``rollup``.

    A (priority, hour) served by one queue holds the same records as its one (priority,
    hour, queue) group, so its percentiles are that group's, copied after aggregating; only
    the hours where queues share a priority are sketched again. Each record thus enters two
    sketches, not three: the sketches are the report's costliest aggregate (no generated
    code, and they made most of the garbage the collector had to clear)."""
    from pyspark.sql import functions as F

    shared = finest.groupBy("priority", "hour").agg((F.count("*") > 1).alias("shared"))
    flagged = derived.select(*ROLLUP_KEYS, "wait_s", "proc_s").join(
        F.broadcast(shared), ["priority", "hour"]
    )
    no_hour, no_queue = F.lit(None).cast("timestamp"), F.lit(None).cast("string")

    def group(hour: Column, queue: Column, level: int | Column, shared: Column) -> Column:
        return F.struct(
            hour.alias("hour"),
            queue.alias("queue"),
            F.lit(level).alias("level"),
            shared.alias("shared"),
        )

    hour, queue, yes = F.col("hour"), F.col("queue"), F.lit(True)
    groups = F.array(
        group(hour, queue, LEVEL_HOURLY, F.col("shared")),
        F.when(F.col("shared"), group(hour, no_queue, LEVEL_PRIORITY_HOUR, yes)),
        *([group(no_hour, no_queue, LEVEL_PRIORITY, yes)] if across_hours else []),
    )
    aggregated = (
        flagged.select("priority", "wait_s", "proc_s", F.explode(groups).alias("g"))
        .where(F.col("g").isNotNull())
        .groupBy("priority", "g.hour", "g.queue", "g.level", "g.shared")
        .agg(*percentile_columns("wait_s", "wait"), *percentile_columns("proc_s", "proc"))
    )
    single = (F.col("level") == LEVEL_HOURLY) & ~F.col("shared")
    copies = F.when(
        single,
        F.array(
            group(hour, queue, LEVEL_HOURLY, yes), group(hour, no_queue, LEVEL_PRIORITY_HOUR, yes)
        ),
    ).otherwise(F.array(group(hour, queue, F.col("level"), yes)))
    return aggregated.select("priority", F.explode(copies).alias("g"), *PERCENTILE_NAMES).select(
        "priority", "g.hour", "g.queue", "g.level", *PERCENTILE_NAMES
    )


# grouping_id bits of rollup(priority, hour, queue): 1 = queue rolled up, 2 = hour too
LEVEL_HOURLY, LEVEL_PRIORITY_HOUR, LEVEL_PRIORITY = 0, 1, 3


def hourly(rolled: DataFrame) -> DataFrame:
    """Per (queue, priority, hour): attempts, outcomes, throughput, wait and processing."""
    from pyspark.sql import functions as F

    return (
        rolled.where(F.col("level") == LEVEL_HOURLY)
        .drop("level", "queues", "first_settled_ms", "last_settled_ms")
        .withColumn("completed_per_s", F.col("completed") / 3600.0)
        .select(*KEYS, *(c for c in rolled.columns if c in HOURLY_COLUMNS), "completed_per_s")
    )


HOURLY_COLUMNS = (
    "attempts", *OUTCOMES, "completed", *(f"{o}_rate" for o in OUTCOMES), "first_deliveries",
    *(f"{k}_p{round(p * 100)}_s" for k in ("wait", "proc") for p in PERCENTILES), "bytes",
)  # fmt: skip


def attempts_distribution(derived: DataFrame, fine: DataFrame | None = None) -> DataFrame:
    """Per (queue, priority, hour, attempt number): how many deliveries were that attempt
    (summed from ``fine``, ``fine_groups`` of ``derived``, when given)."""
    fine = fine_groups(derived) if fine is None else fine
    return fine.groupBy(*KEYS, "attempt").agg(_count_of(fine["n"]).alias("deliveries"))


def dead_letters(derived: DataFrame, fine: DataFrame | None = None) -> DataFrame:
    """Per (queue, priority, hour, outcome, reason) for messages dead-lettered or dropped
    (summed from ``fine``, ``fine_groups`` of ``derived``, when given)."""
    from pyspark.sql import functions as F

    fine = fine_groups(derived) if fine is None else fine
    reason = F.coalesce(F.col("reason"), F.lit(NO_REASON)).alias("reason")
    return (
        fine.where(F.col("outcome").isin(*DEAD_OUTCOMES))
        .groupBy(*KEYS, "outcome", reason)
        .agg(_count_of(F.col("n")).alias("messages"))
    )


HOUR_MS = 3_600_000


def lifecycle(derived: DataFrame) -> DataFrame:
    """One row per (queue, message_id): attempts until its final outcome, time in system.

    The final outcome is that of the last settled attempt; if it was a retry, the message is
    ``in_progress`` (its end is outside the journal) and has no time in system. A message is
    grouped within the UTC hour of its enqueue time (``enq_hour``, epoch hours: every
    attempt of a message carries its enqueue time), so the rows of an hour can be merged
    with later records of its messages (``lifecycle_parts``, ``merge_lifecycle``).
    """
    return lifecycle_view(lifecycle_parts(derived)).drop("enq_hour")


def lifecycle_parts(derived: DataFrame) -> DataFrame:
    """Per (enq_hour, queue, message_id): aggregates that merge with those of more records
    of the same messages (``merge_lifecycle``)."""
    from pyspark.sql import functions as F

    # Every aggregate here keeps a fixed-width buffer, so Spark hash-aggregates. A string
    # in a buffer (max_by of the outcome text by a struct) forced a sort aggregate: two
    # sorts of every record by (queue, message_id), the slowest step of the report's plan.
    # So the last outcome is its index in OUTCOMES, ordered by one long (settle ms, attempt).
    outcome_code = F.array_position(F.array(*map(F.lit, OUTCOMES)), F.col("outcome"))
    order = F.col("settled_ms") * ATTEMPT_SLOTS + F.least(
        F.col("attempt"), F.lit(ATTEMPT_SLOTS - 1)
    )
    keyed = (
        derived
        if "enq_hour" in derived.columns
        else derived.withColumn("enq_hour", F.floor(F.col("enqueued_ms") / HOUR_MS))
    )
    return keyed.groupBy("enq_hour", "queue", "message_id").agg(
        F.max("priority").alias("priority"),
        F.max("attempt").alias("attempts"),
        F.count("*").alias("deliveries"),
        F.max_by(outcome_code, order).alias("last_code"),
        F.max(order).alias("last_order"),
        F.min("enqueued_ms").alias("enqueued_ms"),
        F.max("settled_ms").alias("last_settled_ms"),
    )


def merge_lifecycle(parts: DataFrame) -> DataFrame:
    """``lifecycle_parts`` rows of one message (from several runs) merged into one."""
    from pyspark.sql import functions as F

    return parts.groupBy("enq_hour", "queue", "message_id").agg(
        F.max("priority").alias("priority"),
        F.max("attempts").alias("attempts"),
        F.sum("deliveries").alias("deliveries"),
        F.max_by("last_code", "last_order").alias("last_code"),
        F.max("last_order").alias("last_order"),
        F.min("enqueued_ms").alias("enqueued_ms"),
        F.max("last_settled_ms").alias("last_settled_ms"),
    )


def lifecycle_view(parts: DataFrame) -> DataFrame:
    """The published lifecycle columns of ``lifecycle_parts`` rows (and ``enq_hour``)."""
    from pyspark.sql import functions as F

    outcomes = F.array(*map(F.lit, OUTCOMES))
    last = parts.withColumn(
        "last_outcome", F.element_at(outcomes, F.col("last_code").cast("int"))
    )
    final = F.col("last_outcome").isin(*FINAL_OUTCOMES)
    in_system = (F.col("last_settled_ms") - F.col("enqueued_ms")) / 1000.0
    return last.select(
        "queue",
        "message_id",
        "priority",
        "attempts",
        "deliveries",
        F.when(final, F.col("last_outcome")).otherwise("in_progress").alias("final_outcome"),
        F.timestamp_millis(F.col("enqueued_ms")).alias("enqueued"),
        F.when(final, in_system).alias("time_in_system_s"),
        "enq_hour",
    )


def lifecycle_summary(life: DataFrame) -> DataFrame:
    """Per priority: attempts-until-final distribution and time-in-system percentiles."""
    from pyspark.sql import functions as F

    return (
        life.groupBy("priority", "final_outcome", "attempts")
        .agg(F.count("*").alias("messages"))
        .orderBy("priority", "final_outcome", "attempts")
    )


def time_in_system(life: DataFrame) -> DataFrame:
    """Per priority: p50/p95/p99 of time in system for completed messages."""
    return (
        life.where("time_in_system_s IS NOT NULL")
        .groupBy("priority")
        .agg(*percentile_columns("time_in_system_s", "in_system"))
        .orderBy("priority")
    )
