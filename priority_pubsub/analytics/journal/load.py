"""Reading journals into Spark: explicit schema, bad lines counted and kept aside, never fatal.

Every line falls in exactly one class:
- ``malformed``: not a JSON object of the schema's shape (Spark's corrupt-record column is set
  and no known version could be read), e.g. a torn last line after a kill -9;
- ``unknown_version``: a ``v`` this code cannot read (``READABLE_VERSIONS``: a newer sidecar);
- ``invalid``: a known version but a required field is missing or ``outcome`` is unknown;
- ``released``: a ``release`` record (v2): handed back unseen, no delivery; counted only;
- ``valid``: everything else, the only records the report aggregates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from priority_pubsub.analytics.journal.schema import (
    CORRUPT_COLUMN,
    READABLE_VERSIONS,
    RECORD_OUTCOMES,
    REPORT_FIELDS,
    journal_struct,
    required_field_names,
)
from priority_pubsub.core.outcome import Kind

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

BAD_CLASSES = ("malformed", "unknown_version", "invalid")
SAMPLES_PER_CLASS = 5
SAMPLE_CHARS = 240


@dataclass(frozen=True)
class LineCounts:
    """How many lines fell in each class, with a few examples of each bad class."""

    valid: int = 0
    malformed: int = 0
    unknown_version: int = 0
    invalid: int = 0
    out_of_range: int = 0
    released: int = 0
    """``release`` records: messages handed back unseen (surplus of a wake-up)."""
    samples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def bad(self) -> int:
        return self.malformed + self.unknown_version + self.invalid

    @property
    def total(self) -> int:
        return self.valid + self.bad + self.out_of_range + self.released


def read_raw(spark: SparkSession, journal_glob: str | list[str]) -> DataFrame:
    """Parse JSON lines (globs, Hadoop URIs and .gz all work) into the schema plus a class."""

    raw = (
        spark.read.schema(journal_struct())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        .json(journal_glob)
    )
    return raw.withColumn("_class", _classify())


def _classify() -> Column:
    from pyspark.sql import functions as F

    missing = F.lit(False)
    for name in required_field_names():
        missing = missing | F.col(name).isNull()
    version = F.col("v")
    return (
        F.when(version.isNotNull() & ~version.isin(*READABLE_VERSIONS), "unknown_version")
        .when(F.col(CORRUPT_COLUMN).isNotNull(), "malformed")
        .when(missing | ~F.col("outcome").isin(*RECORD_OUTCOMES), "invalid")
        .when(F.col("outcome") == Kind.RELEASE.value, "released")
        .otherwise("valid")
    )


def in_range(since_ms: int | None, until_ms: int | None) -> Column:
    """Records whose settle time falls in [since, until)."""
    from pyspark.sql import functions as F

    cond = F.lit(True)
    if since_ms is not None:
        cond = cond & (F.col("settled_ms") >= since_ms)
    if until_ms is not None:
        cond = cond & (F.col("settled_ms") < until_ms)
    return cond


@dataclass
class Loaded:
    """The valid records in range (cached: every table reads them) and the line counts."""

    valid: DataFrame
    counts: LineCounts
    _cached: DataFrame

    def release(self) -> None:
        self._cached.unpersist()


def load(
    spark: SparkSession,
    journal_glob: str | list[str],
    since_ms: int | None,
    until_ms: int | None,
    derive: Callable[[DataFrame], DataFrame] | None = None,
) -> Loaded:
    """Parse once into a cached, typed frame; count every class and sample bad lines from it.

    The one parse is the report's largest cost, so it happens once: the cache keeps only
    ``REPORT_FIELDS``, the columns ``derive`` adds (computed once, not per table), the line
    class and, for bad lines only, their text for the samples. One job fills the cache and
    counts the classes; the tables then read the cache (columnar, compressed)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    raw = read_raw(spark, journal_glob)
    klass = F.when((F.col("_class") == "valid") & ~in_range(since_ms, until_ms), "out_of_range")
    classed = raw.withColumn("_class", klass.otherwise(F.col("_class")))
    text = F.coalesce(F.col(CORRUPT_COLUMN), F.to_json(F.struct(*_schema_columns(raw))))
    bad_text = F.when(F.col("_class").isin(*BAD_CLASSES), F.substring(text, 1, SAMPLE_CHARS))
    typed = classed.select("_class", bad_text.alias("_text"), *REPORT_FIELDS)
    cached = (derive(typed) if derive else typed).persist(StorageLevel.MEMORY_AND_DISK)
    grouped = cached.groupBy("_class").agg(F.count("*").alias("n")).collect()
    counts = {r["_class"]: int(r["n"]) for r in grouped}
    samples: dict[str, list[str]] = {}
    if any(counts.get(c, 0) for c in BAD_CLASSES):
        rows = (
            cached.where(F.col("_class").isin(*BAD_CLASSES))
            .select("_class", "_text")
            .limit(SAMPLES_PER_CLASS * len(BAD_CLASSES) * 20)
            .collect()
        )
        for row in rows:
            bucket = samples.setdefault(row["_class"], [])
            if len(bucket) < SAMPLES_PER_CLASS:
                bucket.append(row["_text"])
    line_counts = LineCounts(
        valid=counts.get("valid", 0),
        malformed=counts.get("malformed", 0),
        unknown_version=counts.get("unknown_version", 0),
        invalid=counts.get("invalid", 0),
        out_of_range=counts.get("out_of_range", 0),
        released=counts.get("released", 0),
        samples=samples,
    )
    valid = cached.where(F.col("_class") == "valid").drop("_class", "_text")
    return Loaded(valid=valid, counts=line_counts, _cached=cached)


def _schema_columns(raw: DataFrame) -> list[str]:
    return [c for c in raw.columns if c not in (CORRUPT_COLUMN, "_class")]
