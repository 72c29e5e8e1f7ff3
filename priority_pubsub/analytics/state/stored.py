"""The state's stored tables, read and written through the ``Store``: the records by settle
hour, the lifecycle by enqueue hour, the summaries (one file each per run) and the per-hour
summaries kept by hour (``HOURLY``). Which run holds which rows is the manifest's to say
(``store.Manifest``); what a run computes to write here is ``increment``'s.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from priority_pubsub.analytics.journal.schema import REPORT_FIELDS, journal_struct
from priority_pubsub.analytics.spark.tuning import session_conf
from priority_pubsub.analytics.state.store import Manifest, Store, is_local

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType


SUMMARIES = (
    "rollup", "fine", "hist_totals", "life_counts", "life_hist_totals", "star_hour_counts",
    "star_hours", "cap_hours",
)  # fmt: skip


HOURLY = {"hist": "hour_id", "life_hist": "enq_hour"}
"""Per-hour summaries kept by hour (``Manifest.summary_hours``), by their hour column.

Why. A histogram has a row per hour, priority and bucket: ~0.9 M rows for a month of 1 M
records, more for 10 M (more buckets filled per hour). Copied into every run's summaries,
they made a run's cost grow with the history: one task rewrote them all (~1 s for 1 M) and
the published tables read them all. Here a run writes the rows of the hours it recomputed,
the manifest names the run holding each hour's rows, and ``<name>_totals`` keeps the sum
over every hour (what the published percentiles read): the earlier totals, plus the fresh
rows, less the rows they replace. Counts, so the totals equal a full run's exactly."""


def record_struct() -> StructType:
    """The stored records: the report's fields and the settle hour (``hour_key``)."""
    from pyspark.sql import types as Ty

    journal = journal_struct(with_corrupt_column=False).fields
    fields = [f for f in journal if f.name in REPORT_FIELDS]
    return Ty.StructType([*fields, Ty.StructField("hour_key", Ty.LongType(), True)])


def read_partitions(
    spark: SparkSession,
    store: Store,
    table: str,
    column: str,
    runs_of: Mapping[int, Sequence[str]],
    schema: StructType | None = None,
) -> DataFrame | None:
    """The partitions ``column=<key>`` of ``data/<run>/<table>`` for each key and its runs
    (``runs_of``), without the partition column; None when there are none.

    A few partitions of a run are read by their paths; more (a rebuild's hundreds of hours)
    by the run's table directory and a filter on the partition column. Either way the
    files are listed by the driver on a local state (``listed_by_driver``)."""
    from pyspark.sql import functions as F

    keys_of: dict[str, list[int]] = {}
    for key, runs in runs_of.items():
        for run in runs:
            keys_of.setdefault(run, []).append(int(key))
    frames = []
    with listed_by_driver(spark, store):
        for run, keys in sorted(keys_of.items()):
            reader = spark.read if schema is None else spark.read.schema(schema)
            if len(keys) <= PATHS_BY_NAME:
                paths = [store.path("data", run, table, f"{column}={k}") for k in sorted(keys)]
                frames.append(reader.parquet(*paths))
                continue
            frame = reader.parquet(store.path("data", run, table))
            frames.append(frame.where(F.col(column).isin(sorted(keys))).drop(column))
    return union(frames)


PATHS_BY_NAME = 32
"""Up to this many partitions of one run are read by their paths (Spark's own threshold for
listing paths on the driver, ``spark.sql.sources.parallelPartitionDiscovery.threshold``)."""


DRIVER_LISTING = {"spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000"}


def listed_by_driver(spark: SparkSession, store: Store) -> contextlib.AbstractContextManager[None]:
    """For reads of a local state: list its files on the driver, however many directories.

    Spark lists more than 32 paths (or a directory of more than 32 partitions) in a job of
    one task per path, meant for object stores where each listing is a round trip: on a
    local disk that job cost ~10-20 s of a 1 M-record rebuild on a busy 2-core machine (719
    hourly partitions, listed twice per read), where the driver lists them in milliseconds.
    Other file systems keep Spark's parallel listing."""
    return session_conf(spark, DRIVER_LISTING) if is_local(store.root) else contextlib.nullcontext()


def summaries_of(spark: SparkSession, store: Store, manifest: Manifest) -> dict[str, DataFrame]:
    """The summary tables of the state's current run ({} for an empty state), read with the
    schemas the manifest notes (``Summaries.schemas``): Spark infers a Parquet schema in a
    job of its own, one per table (8 jobs, ~0.7 s of a run on a fresh JVM)."""
    from pyspark.sql.types import StructType

    if manifest.summaries is None:
        return {}
    base = ("data", manifest.summaries, "summaries")
    frames = {}
    for name in SUMMARIES:
        noted = manifest.schemas.get(name)
        reader = spark.read
        if noted is not None:
            reader = reader.schema(StructType.fromJson(json.loads(noted)))
        frames[name] = reader.parquet(store.path(*base, name))
    return frames


@dataclass(frozen=True)
class Written:
    """What a step of a run wrote: the schema of each summary table (for the manifest) and,
    for each per-hour summary, the run holding each hour. Steps that run side by side each
    return theirs, and the run adds them up (``|``): no step writes into another's."""

    schemas: Mapping[str, str] = field(default_factory=dict)
    hours_held: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per-hour summary -> hour -> the run holding its rows (``Manifest.summary_hours``)."""

    def __or__(self, other: Written) -> Written:
        return Written({**self.schemas, **other.schemas}, {**self.hours_held, **other.hours_held})


@dataclass(frozen=True)
class Summaries:
    """Where a run writes its summary tables, and the previous run's to build on
    (``earlier``): each written as one file under ``data/<run>/summaries/``, and the per-hour
    ones (``HOURLY``) under ``data/<run>/hours/``. Every write returns what it wrote
    (``Written``)."""

    store: Store
    run: str
    earlier: dict[str, DataFrame]
    small: bool = False
    """A small run (``increment.small_run``): each summary's last stage is small enough for
    one task."""
    hours_held: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per-hour summary -> hour -> the run holding its rows, as the previous run left it."""

    def get(self, name: str) -> DataFrame | None:
        return self.earlier.get(name)

    def write(self, name: str, fresh: DataFrame, keep: Column | None = None) -> Written:
        """Write summary ``name``: the fresh rows, and the earlier rows ``keep`` selects
        (none without ``keep``)."""
        earlier = self.earlier.get(name)
        frame = fresh
        if earlier is not None and keep is not None:
            frame = earlier.where(keep).unionByName(fresh)
        write_one_file(frame, self.store.path("data", self.run, "summaries", name), self.small)
        return Written(schemas={name: frame.schema.json()})

    def write_hours(
        self, spark: SparkSession, name: str, fresh: DataFrame, hours: list[int], by: list[str]
    ) -> Written:
        """Per-hour summary ``name`` (``HOURLY``): ``fresh``, the rows of ``hours``, as this
        run's file, and ``<name>_totals`` (the sums of ``n`` by ``by``) brought up to date."""
        from pyspark.sql import functions as F

        held = dict(self.hours_held.get(name, {}))
        replaced = read_hours(
            spark, self.store, name, {h: held[str(h)] for h in hours if str(h) in held},
            fresh.schema,
        )  # fmt: skip
        path = self.store.path("data", self.run, "hours", name)
        write_one_file(fresh, path, self.small)
        written = spark.read.schema(fresh.schema).parquet(path)  # read back, not recomputed
        parts = [written.groupBy(*by).agg(F.sum("n").alias("n"))]
        if replaced is not None:
            parts.append(replaced.groupBy(*by).agg((-F.sum("n")).alias("n")))
        earlier = self.earlier.get(f"{name}_totals")
        if earlier is not None:
            parts.append(earlier)
        summed = union(parts)
        assert summed is not None  # the fresh rows are always there
        totals = summed.groupBy(*by).agg(F.sum("n").alias("n")).where(F.col("n") != 0)
        return self.write(f"{name}_totals", totals) | Written(
            hours_held={name: {**held, **{str(h): self.run for h in hours}}})


def read_hours(
    spark: SparkSession,
    store: Store,
    name: str,
    run_of_hour: Mapping[int, str],
    schema: StructType,
) -> DataFrame | None:
    """The rows of per-hour summary ``name`` for each hour, from the run holding it (one
    file per run, filtered on the hour); None for no hours."""
    from pyspark.sql import functions as F

    hours_of_run: dict[str, list[int]] = {}
    for hour, run in run_of_hour.items():
        hours_of_run.setdefault(run, []).append(int(hour))
    frames = [
        spark.read.schema(schema)
        .parquet(store.path("data", run, "hours", name))
        .where(F.col(HOURLY[name]).isin(sorted(hours)))
        for run, hours in sorted(hours_of_run.items())
    ]
    return union(frames)


def union(frames: Sequence[DataFrame]) -> DataFrame | None:
    """The frames' rows, matched by column name; None for no frames."""
    return functools.reduce(lambda a, b: a.unionByName(b), frames) if frames else None


def write_one_file(frame: DataFrame, path: str, small: bool = False) -> None:
    """``frame`` as one Parquet file (a summary: rows grow with hours or minutes, not records).

    In general ``repartition(1)``, not ``coalesce(1)``: a coalesce reaches back to the last
    shuffle, so the stage before it (the sweeps' window over every event, or a summary's
    final aggregation) ran in a single task (1 M records on a 30-day history: the sweeps'
    windows were two single-task stages of 2 M events each). In a ``small`` run
    (``increment.small_run``) that stage is a few hours of records and one task does it at
    once, where the extra shuffle is one more job per summary, eight per run (faster by a
    few seconds: docs/performance.md, the delivery report)."""
    (frame.coalesce(1) if small else frame.repartition(1)).write.parquet(path)
