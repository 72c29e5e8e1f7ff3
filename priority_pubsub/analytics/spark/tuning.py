"""Spark settings sized from the input, and named, timed steps (Spark's own job timings).

Why. Spark's defaults are for a cluster: 200 shuffle partitions whatever the data, so a
1 M-record report ran hundreds of tiny tasks per aggregate. The report sets the shuffle
partitions from the journal's size (``SHUFFLE_BYTES_PER_PARTITION`` per partition, at least
the cores Spark has; unless the launcher set them) and turns adaptive query execution on
(it coalesces small shuffle partitions and splits skewed ones at run time). It also keeps
the cached journal frame uncompressed (``CACHE``): Spark's columnar cache compression tries
every encoding on every value while the cache fills, which cost about as much CPU as
parsing the JSON (1 M records: ~4 s of 9 s), to save memory the cache rarely lacks (about
120 bytes a record; ``MEMORY_AND_DISK`` spills what does not fit). Each step of
the report runs under a job description (``report: <step>``), so Spark's UI, event log and
``bench.bench_report --event-log`` show which step each job and stage belongs to;
``Steps`` also keeps each step's wall time for the summary.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

R = TypeVar("R")
SHUFFLE_BYTES_PER_PARTITION = 128 * 1024 * 1024
MAX_SHUFFLE_PARTITIONS = 2000
ADAPTIVE = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",
}
CACHE = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}
OWN_SESSION = {"spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}
"""For the session the report starts itself (``priority-pubsub report``), applied before its JVM
starts. The report is a batch job that runs for seconds: the parallel collector stops the
world briefly and leaves both cores to the tasks between collections, where the default G1
runs concurrent marking threads beside them: a few seconds less on 1 M records
(``bench.bench_report``, docs/performance.md). A session given by the caller (or started
by ``spark-submit``) keeps its own JVM options."""
ONE_RECORD_PER_GROUP = {"spark.sql.execution.bypassPartialAggregation": "true"}
"""For an aggregation whose groups hold about one record each (the lifecycle: one group per
message, most messages delivered once). A pre-shuffle partial aggregation reduces nothing
there and still fills a hash map of every record in each task; bypassing it (Spark >= 4.3;
older versions ignore the key) aggregates once, after the shuffle: the lifecycle step's
task time fell by a third, the table unchanged (``bench.bench_report``'s event log,
docs/performance.md)."""


def input_bytes(spark: SparkSession, journal_glob: str) -> int | None:
    """Total size of the files the glob matches, through Hadoop (any URI Spark reads);
    None when the file system cannot say (the partitions then stay as configured)."""
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        path = jvm.org.apache.hadoop.fs.Path(journal_glob)
        statuses = path.getFileSystem(conf).globStatus(path) or []
        return int(sum(s.getLen() for s in statuses))
    except Exception:  # a file system without glob support: keep Spark's setting
        return None


def shuffle_partitions(size: int, cores: int) -> int:
    """Partitions for the report's shuffles: one per ``SHUFFLE_BYTES_PER_PARTITION`` of
    input, never fewer than the cores, never more than ``MAX_SHUFFLE_PARTITIONS``."""
    wanted = math.ceil(size / SHUFFLE_BYTES_PER_PARTITION)
    return max(cores, min(wanted, MAX_SHUFFLE_PARTITIONS))


def tune(spark: SparkSession, journal_glob: str) -> int | None:
    """Apply AQE, the cache setting and input-sized shuffle partitions to ``spark``; the
    partitions chosen.

    A value the launcher set explicitly (``spark-submit --conf``, the builder) is kept."""
    return tune_partitions(spark, input_bytes(spark, journal_glob))


def tune_partitions(spark: SparkSession, size: int | None) -> int | None:
    """``tune`` for an input of ``size`` bytes (None: keep the partitions as configured)."""
    given = spark.sparkContext.getConf()
    for key, value in {**ADAPTIVE, **CACHE}.items():
        if not given.contains(key):
            spark.conf.set(key, value)
    if given.contains("spark.sql.shuffle.partitions"):
        return int(spark.conf.get("spark.sql.shuffle.partitions") or 0) or None
    if size is None:
        return None
    partitions = shuffle_partitions(size, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    return partitions


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Run the jobs inside with ``settings`` on the session, then put back what was there
    (unset keys unset again), so a setting meant for one step leaks into no other."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


@contextlib.contextmanager
def cached(frame: DataFrame) -> Iterator[DataFrame]:
    """``frame`` cached for the jobs inside, released after them even when one fails: a
    session passed in may live on (a notebook, a job running many reports)."""
    held = frame.persist()
    try:
        yield held
    finally:
        held.unpersist()


class StepListener(Protocol):
    """Told when a step starts (``seconds`` None) and ends (its wall seconds)."""

    def __call__(self, name: str, seconds: float | None) -> None: ...


@dataclass
class Steps:
    """Named steps of one report run: job descriptions for Spark, wall seconds for us (and
    for ``listener``: the terminal's progress display)."""

    spark: SparkSession
    seconds: dict[str, float] = field(default_factory=dict)
    listener: StepListener | None = None

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        context = self.spark.sparkContext
        context.setJobDescription(f"report: {name}")
        if self.listener:
            self.listener(name, None)
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.seconds[name] = round(self.seconds.get(name, 0.0) + took, 3)
            context.setJobDescription(None)  # type: ignore[arg-type]
            if self.listener:
                self.listener(name, took)


def side_by_side(spark: SparkSession, *steps: Callable[[], R]) -> list[R]:
    """Run independent steps at once, one driver thread each; what each returned, in the
    order given, or the first failure once every step has ended. Steps return what they
    made rather than write it into something shared: one place assembles it.

    Why. Each large stage already keeps every core busy, but between stages the driver
    works alone: it plans, compiles generated code and runs one-task stages, while the
    executors wait. Two steps in two threads fill those gaps with each other's tasks
    (docs/performance.md, the delivery report). Only for steps that set
    nothing on the session (``session_conf`` is session-wide: a setting made for one step
    would reach the jobs the other plans meanwhile). ``inheritable_thread_target`` gives
    each thread its own JVM thread and job properties (PySpark's pinned thread mode), so
    each step's jobs keep their ``report: <step>`` description."""
    from concurrent.futures import ThreadPoolExecutor

    import pyspark

    def pinned(step: Callable[[], R]) -> Callable[[], R]:
        # PySpark >= 4 takes the session (its tags are inherited too), 3.5 the function. A
        # wrapper per step: one wrapper shares one copy of the properties between threads,
        # so a job description set in one step would show on the other's jobs.
        if int(pyspark.__version__.split(".")[0]) >= 4:
            return pyspark.inheritable_thread_target(spark)(step)
        return pyspark.inheritable_thread_target(step)

    with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="report-step") as pool:
        futures = [pool.submit(pinned(step)) for step in steps]
        return [future.result() for future in futures]
