"""One incremental run: new journal files in, the state's tables brought up to date.

What a run reads. The new files, once (explicit schema); the stored records of the hours
their records touch; and the small per-hour and per-minute summaries of every other hour.
What it writes, all under ``data/<run>/`` of the state (see ``state``):

- ``records/hour_id=H/``: the new valid records, by settle hour (epoch hours);
- ``lifecycle/enq_hour=E/``: per message, aggregates that merge with later attempts
  (``tables.lifecycle_parts``), for each enqueue hour the new records touch: the previous
  rows of that hour merged with the new ones (messages still open at the last run's end
  are completed here);
- ``summaries/``: per-hour rows of every hour (the touched hours recomputed from their
  records, the others copied from the previous run's summaries): ``rollup`` (per queue and
  per priority, percentiles by ``percentile_approx`` of the hour's records), ``fine``
  (``tables.fine_groups``: attempts, dead letters and capacity sum them), ``life_counts``
  per enqueue hour; the sweeps' per-minute rows folded by hour (``star_hour_counts``,
  ``star_hours``, ``cap_hours``: ``starvation.by_hour``), recomputed from the hour of the
  first event a new record has (its enqueue, receive or forward time), from the records
  settled from then on; and the sums over every hour of the histograms below
  (``hist_totals``, ``life_hist_totals``);
- ``hours/``: the log-scale histograms (``histogram``) of the hours the run recomputed
  only: ``hist`` (wait and processing time per settle hour) and ``life_hist`` (time in
  system per enqueue hour). They hold a row per hour, priority and bucket, too many to copy
  every run (``HOURLY``).

Late and out-of-order records land in their hour: every grouping is by the record's own
times, never by the file or the run. A record whose enqueue lies far back makes the sweeps
start there (the backlog after it changed); the other tables stay per hour.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from priority_pubsub.analytics.journal.files import JournalFile
from priority_pubsub.analytics.journal.load import BAD_CLASSES, SAMPLES_PER_CLASS, LineCounts, load
from priority_pubsub.analytics.journal.schema import REPORT_FIELDS
from priority_pubsub.analytics.journal.window import SettleWindow
from priority_pubsub.analytics.model import histogram
from priority_pubsub.analytics.model import tables as T
from priority_pubsub.analytics.model.capacity import fold_sweeps, sweep_minutes
from priority_pubsub.analytics.model.starvation import (
    by_hour,
    fold_counts,
    fold_minutes,
    starvation_minutes,
)
from priority_pubsub.analytics.spark.jvm import QUICK_JIT_MAX_BYTES
from priority_pubsub.analytics.spark.tuning import (
    ONE_RECORD_PER_GROUP,
    Steps,
    session_conf,
    side_by_side,
)
from priority_pubsub.analytics.state.store import Manifest, Store
from priority_pubsub.analytics.state.stored import (
    Summaries,
    Written,
    listed_by_driver,
    read_partitions,
    record_struct,
    summaries_of,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

HOUR_MS = T.HOUR_MS
MINUTE_MS = 60_000
LINE_FIELDS = ("valid", "malformed", "unknown_version", "invalid", "out_of_range", "released")


@dataclass
class Increment:
    """What one run added: its line counts, and the hours it recomputed."""

    lines: LineCounts = field(default_factory=LineCounts)
    hours: list[int] = field(default_factory=list)
    enqueue_hours: list[int] = field(default_factory=list)
    sweep_from_hour: int | None = None


def with_hour_id(valid: DataFrame) -> DataFrame:
    """The derived columns (``tables.with_derived``) and ``hour_id``: the settle hour."""
    from pyspark.sql import functions as F

    derived = T.with_derived(valid)
    return derived.withColumn("hour_id", F.floor(F.col("settled_ms") / HOUR_MS))


def read_records(
    spark: SparkSession, store: Store, runs_of_hour: dict[str, list[str]], hours: list[int]
) -> DataFrame | None:
    """The stored records of ``hours`` (derived, with ``hour_id``); None when there are none."""
    runs = {h: runs_of_hour.get(str(h), []) for h in hours}
    stored = read_partitions(spark, store, "records", "hour_id", runs, record_struct())
    return None if stored is None else with_hour_id(stored.select(*REPORT_FIELDS))


def run_increment(
    spark: SparkSession,
    store: Store,
    previous: Manifest,
    files: list[JournalFile],
    run: str,
    window: SettleWindow,
    steps: Steps,
) -> tuple[Manifest, Increment]:
    """Read ``files`` and write run ``run``'s data; the manifest to commit and what changed.
    Nothing is committed here (``Store.commit`` is the caller's last write)."""
    from pyspark.sql import functions as F

    with steps.step("read new files"):
        loaded = load(spark, [f.read_path for f in files], window.since_ms, window.until_ms,
                      derive=with_hour_id)
    try:
        with steps.step("find hours touched"):
            touched = _touched(loaded.valid)
        manifest = _next_manifest(previous, files, loaded.counts, run)
        increment = Increment(lines=loaded.counts)
        if touched is None:  # no valid record: only the files and lines change
            return manifest, increment
        hours, enqueue_hours, priorities, first_event_ms = touched
        all_priorities = sorted(set(previous.priorities) | set(priorities))
        sweep_from: int | None = first_event_ms // HOUR_MS
        if previous.priorities and all_priorities != sorted(previous.priorities):
            sweep_from = None  # a new priority: every sweep's scopes change, from the start
        if previous.summaries is None:
            sweep_from = None
        increment.hours, increment.enqueue_hours = hours, enqueue_hours
        increment.sweep_from_hour = sweep_from
        new = loaded.valid

        def append_step() -> Written:
            with steps.step("append records"):
                stored = new.select(*REPORT_FIELDS, F.col("hour_id").alias("hour_key"), "hour_id")
                stored.write.partitionBy("hour_id").parquet(store.path("data", run, "records"))
            return Written()  # the records are noted by hour below, no summary

        old_hours = [int(h) for h in previous.records if sweep_from is None or int(h) >= sweep_from]
        small = small_run(sum(f.size for f in files),
                          len(set(old_hours) | set(hours) | set(enqueue_hours)),
                          rebuild=sweep_from is None)
        old = read_records(spark, store, previous.records, old_hours)
        span = new if old is None else new.unionByName(old).persist()
        try:
            per_hour = span.where(F.col("hour_id").isin(hours)) if old is not None else new
            summaries = Summaries(store, run, summaries_of(spark, store, previous), small,
                                  hours_held=dict(previous.summary_hours))

            def lifecycle_step() -> Written:
                with steps.step("lifecycle"):
                    return _write_lifecycle(spark, store, run, new, previous, enqueue_hours,
                                            summaries, one_record_per_group=not small)
            from_ms = None if sweep_from is None else sweep_from * HOUR_MS

            def hours_step() -> Written:
                with steps.step("hours recomputed"):
                    return _write_hour_summaries(spark, per_hour, hours, summaries)

            def sweeps_step() -> Written:
                with steps.step("starvation and capacity minutes"):
                    return _write_sweeps(spark, span, all_priorities, from_ms, summaries)

            # side by side: on 2 cores a small run's jobs leave a core idle while the driver
            # plans (docs/performance.md, the delivery report). A large
            # run's lifecycle goes alone: it sets a session option for its jobs
            # (``ONE_RECORD_PER_GROUP``), which would reach the jobs the others plan. (Its
            # reads' ``listed_by_driver`` is a session option too, of speed only, as beside
            # the published tables; no other of the four sets one, so none is put back early)
            if small:
                parts = side_by_side(spark, append_step, lifecycle_step, hours_step, sweeps_step)
            else:
                parts = [append_step(), lifecycle_step(),
                         *side_by_side(spark, hours_step, sweeps_step)]
            written = functools.reduce(operator.or_, parts, Written())
        finally:
            if old is not None:
                span.unpersist()
        for h in hours:
            manifest.records.setdefault(str(h), []).append(run)
        for e in enqueue_hours:
            manifest.lifecycle[str(e)] = run
        manifest.summaries = run
        manifest.schemas = dict(written.schemas)
        manifest.summary_hours = {**previous.summary_hours,
                                  **{name: dict(held) for name, held in written.hours_held.items()}}
        manifest.priorities = all_priorities
        manifest.unpublished = sorted(set(manifest.unpublished) | set(enqueue_hours))
        return manifest, increment
    finally:
        loaded.release()


def _touched(valid: DataFrame) -> tuple[list[int], list[int], list[int], int] | None:
    """Settle hours, enqueue hours and priorities of the new records, and their first
    event (ms): one small aggregation, collected (rows grow with hours, not records)."""
    from pyspark.sql import functions as F

    first_event = F.least("enqueued_ms", "received_ms", "forwarded_ms", "settled_ms")
    rows = (
        valid.groupBy(
            "hour_id", F.floor(F.col("enqueued_ms") / HOUR_MS).alias("enq_hour"), "priority"
        )
        .agg(F.min(first_event).alias("first_ms"))
        .collect()
    )
    if not rows:
        return None
    return (
        sorted({int(r["hour_id"]) for r in rows}),
        sorted({int(r["enq_hour"]) for r in rows}),
        sorted({int(r["priority"]) for r in rows}),
        min(int(r["first_ms"]) for r in rows),
    )


def _next_manifest(
    previous: Manifest, files: list[JournalFile], counts: LineCounts, run: str
) -> Manifest:
    manifest = Manifest.from_json(previous.to_json())  # a deep copy
    manifest.seq = previous.seq + 1
    for f in files:
        manifest.files[f.name] = {"hash": f.hash, "size": f.size, "path": f.path, "run": run}
    for name in LINE_FIELDS:
        manifest.lines[name] = manifest.lines.get(name, 0) + int(getattr(counts, name))
    for klass in BAD_CLASSES:
        kept = manifest.samples.setdefault(klass, [])
        kept.extend(counts.samples.get(klass, [])[: SAMPLES_PER_CLASS - len(kept)])
    return manifest


def line_counts(manifest: Manifest) -> LineCounts:
    """The line counts of every file the state has read."""
    return LineCounts(
        **{name: manifest.lines.get(name, 0) for name in LINE_FIELDS},
        samples={k: list(v) for k, v in manifest.samples.items() if v},
    )


def _histograms(records: DataFrame) -> DataFrame:
    """Per (hour_id, priority, metric, bucket): how many waits / processing times."""
    from pyspark.sql import functions as F

    metrics = F.array(
        F.struct(F.lit("wait").alias("metric"), histogram.bucket(F.col("wait_s")).alias("bucket")),
        F.struct(F.lit("proc").alias("metric"), histogram.bucket(F.col("proc_s")).alias("bucket")),
    )
    return (
        records.select("hour_id", "priority", F.inline(metrics))
        .where(F.col("bucket").isNotNull())
        .groupBy("hour_id", "priority", "metric", "bucket")
        .agg(F.count("*").alias("n"))
    )


def _write_hour_summaries(
    spark: SparkSession, records: DataFrame, hours: list[int], summaries: Summaries
) -> Written:
    from pyspark.sql import functions as F

    hour_id = F.floor(F.unix_seconds(F.col("hour")) / 3600)
    fine = T.fine_groups(records).withColumn("hour_id", hour_id).persist()
    try:
        fresh = {
            "fine": fine,
            "rollup": T.rollup(records, fine.drop("hour_id"), across_hours=False).withColumn(
                "hour_id", hour_id
            ),
        }
        written = Written()
        for name, frame in fresh.items():
            written |= summaries.write(name, frame, keep=~F.col("hour_id").isin(hours))
        by = ["priority", "metric", "bucket"]
        return written | summaries.write_hours(spark, "hist", _histograms(records), hours, by)
    finally:
        fine.unpersist()


SMALL_RUN_BYTES = QUICK_JIT_MAX_BYTES
SMALL_RUN_HOURS = 6


def small_run(new_bytes: int, hours_read: int, rebuild: bool) -> bool:
    """Whether a run's summaries are small enough to be finished in one task each: not a
    rebuild, new files of at most one rotated journal file (``SMALL_RUN_BYTES``, as the
    quick JIT's rule), and at most ``SMALL_RUN_HOURS`` stored hours read beside them (a late
    record far back makes the sweeps read every hour since: a large run)."""
    return not rebuild and new_bytes <= SMALL_RUN_BYTES and hours_read <= SMALL_RUN_HOURS


def _write_lifecycle(
    spark: SparkSession,
    store: Store,
    run: str,
    new: DataFrame,
    previous: Manifest,
    enqueue_hours: list[int],
    summaries: Summaries,
    one_record_per_group: bool = True,
) -> Written:
    """The lifecycle rows of ``enqueue_hours`` and their summaries. ``one_record_per_group``
    sets ``ONE_RECORD_PER_GROUP`` for the aggregation (a large run: it saves the partial
    aggregation's hash map of every record); a small run leaves the session alone, so the
    step can run beside others."""
    from pyspark.sql import functions as F

    # one shuffle, by enqueue hour: the aggregation needs no other, and each task writes
    # whole hours (few files per hour, not one per task and hour)
    keyed = new.withColumn("enq_hour", F.floor(F.col("enqueued_ms") / HOUR_MS))
    parts = T.lifecycle_parts(keyed.repartition("enq_hour"))
    runs = {e: [previous.lifecycle[str(e)]] for e in enqueue_hours if str(e) in previous.lifecycle}
    stored = read_partitions(spark, store, "lifecycle", "enq_hour", runs)
    if stored is not None:
        earlier_parts = stored.withColumnRenamed("enq_key", "enq_hour")
        parts = T.merge_lifecycle(earlier_parts.unionByName(parts))
    path = store.path("data", run, "lifecycle")
    with session_conf(spark, ONE_RECORD_PER_GROUP if one_record_per_group else {}):
        parts.withColumn("enq_key", F.col("enq_hour")).write.partitionBy("enq_hour").parquet(path)
    with listed_by_driver(spark, store):
        written = spark.read.parquet(path)
    written = written.drop("enq_hour").withColumnRenamed("enq_key", "enq_hour")
    view = T.lifecycle_view(written)
    counts = view.groupBy("enq_hour", "priority", "final_outcome", "attempts").agg(
        F.count("*").alias("messages")
    )
    in_system = histogram.bucket(F.col("time_in_system_s")).alias("bucket")
    hist = (
        view.where(F.col("time_in_system_s").isNotNull())
        .groupBy("enq_hour", "priority", in_system)
        .agg(F.count("*").alias("n"))
    )
    return summaries.write("life_counts", counts, ~F.col("enq_hour").isin(enqueue_hours)) | (
        summaries.write_hours(spark, "life_hist", hist, enqueue_hours, ["priority", "bucket"]))


def _write_sweeps(
    spark: SparkSession,
    records: DataFrame,
    priorities: list[int],
    from_ms: int | None,
    summaries: Summaries,
) -> Written:
    from pyspark.sql import functions as F

    def starvation_step() -> Written:
        counts, minutes = starvation_minutes(
            spark,
            records,
            priorities,
            from_ms,
            summaries.get("star_hour_counts") if from_ms is not None else None,
            summaries.get("star_hours") if from_ms is not None else None,
        )
        return (summaries.write("star_hour_counts", by_hour(counts, fold_counts))
                | summaries.write("star_hours", by_hour(minutes, fold_minutes)))

    def capacity_step() -> Written:
        sweep = by_hour(sweep_minutes(records, priorities, from_ms), fold_sweeps)
        first_bucket = (from_ms or 0) // MINUTE_MS
        keep = F.col("bucket") < first_bucket if from_ms is not None else None
        return summaries.write("cap_hours", sweep, keep)

    starvation, capacity = side_by_side(spark, starvation_step, capacity_step)
    return starvation | capacity
