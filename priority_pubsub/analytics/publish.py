"""The output directory's tables and the page, from the state's summaries (never records).

Every run rewrites the small tables (``hourly``, ``attempts``, ``dead_letters``,
``starvation``, ``capacity``: rows grow with hours, not records) from the committed
summaries, so a run killed while publishing is repaired by the next. ``lifecycle`` (a row
per message) is partitioned by enqueue hour (``enq_hour``) and only the hours a run changed
are rewritten (dynamic partition overwrite); the manifest keeps those hours as
``unpublished`` until the ``published`` marker says they are out. Figures across hours come
from per-hour rows: counts and sums add up, percentiles are read from summed log-scale
histograms (``histogram``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from priority_pubsub.analytics.journal.schema import OUTCOMES
from priority_pubsub.analytics.model import histogram
from priority_pubsub.analytics.model import tables as T
from priority_pubsub.analytics.model.capacity import (
    capacity_from_fine,
    observed_peak,
    peaks_from_minutes,
)
from priority_pubsub.analytics.model.starvation import collect_rows, from_minutes
from priority_pubsub.analytics.render.page import PageData
from priority_pubsub.analytics.spark.frames import small_frame
from priority_pubsub.analytics.spark.tuning import Steps, side_by_side
from priority_pubsub.analytics.state.store import Manifest, Store
from priority_pubsub.analytics.state.stored import read_partitions, summaries_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOP_REASONS = 20
QUANTILES = (*T.PERCENTILES, 1.0)
"""The percentiles, and the largest value (``*_max_s``)."""
CAPACITY_SCHEMA = (
    "priority int, deliveries long, arrival_rate_per_s double, mean_service_s double, "
    "offered_load double, cumulative_load double, workers_needed int, "
    "observed_max_in_flight int, observed_mean_in_flight double"
)


@dataclass
class _Part:
    """What one publishing step made: the tables it wrote (name -> path) and the page's
    fields it collected (``PageData`` field -> value)."""

    tables: dict[str, str] = field(default_factory=dict)
    page: dict[str, Any] = field(default_factory=dict)


def publish(
    spark: SparkSession,
    store: Store,
    manifest: Manifest,
    out: Path,
    page: PageData,
    steps: Steps,
    lifecycle_hours: list[int],
    rebuild_lifecycle: bool,
) -> PageData:
    """Write the output tables from ``manifest``; ``page`` with what they show (small rows
    only) and where they are."""
    from pyspark.sql import functions as F

    summaries = summaries_of(spark, store, manifest)
    if not summaries:
        return replace(page, tables={})
    rolled = summaries["rollup"]
    fine_rows = summaries["fine"].drop("hour_id")

    def hourly() -> _Part:
        with steps.step("table hourly"):
            path = _write(T.hourly(rolled.drop("hour_id")), out, "hourly")
            per_hour = _rows(rolled.where(F.col("level") == T.LEVEL_PRIORITY_HOUR))
            summary = _priority_rows(per_hour, _quantiles(summaries["hist_totals"], "metric"))
            return _Part({"hourly": path}, {
                "hourly": _hourly_rows(per_hour),
                "summary": summary,
                "first_ms": min((r["first_settled_ms"] for r in summary), default=None),
                "last_ms": max((r["last_settled_ms"] for r in summary), default=None),
            })

    def attempts_and_dead_letters() -> _Part:
        with steps.step("table attempts"):
            attempts = _write(T.attempts_distribution(fine_rows, fine_rows), out, "attempts")
        with steps.step("table dead letters"):
            dead = _write(T.dead_letters(fine_rows, fine_rows), out, "dead_letters")
            reasons = _top_reasons(spark.read.parquet(dead))
        return _Part({"attempts": attempts, "dead_letters": dead}, {"reasons": reasons})

    def lifecycle() -> _Part:
        with steps.step("table lifecycle"):
            path = _publish_lifecycle(
                spark, store, manifest, out, lifecycle_hours, rebuild_lifecycle
            )
            attempts = _rows(
                summaries["life_counts"]
                .groupBy("priority", "final_outcome", "attempts")
                .agg(F.sum("messages").alias("messages"))
                .orderBy("priority", "final_outcome", "attempts")
            )
            in_system = _in_system_rows(summaries["life_hist_totals"])
        return _Part({"lifecycle": path}, {"attempts": attempts, "in_system": in_system})

    def starvation_and_capacity() -> _Part:
        with steps.step("table starvation"):
            table = from_minutes(spark, list(manifest.priorities), summaries["star_hours"])
            starvation = _write(table, out, "starvation")
            starved = collect_rows(spark.read.parquet(starvation))
        with steps.step("table capacity"):
            peaks = peaks_from_minutes(summaries["cap_hours"])
            rows = capacity_from_fine(fine_rows, page.target_wait_s, peaks)
            frame = small_frame(spark, [asdict(c) for c in rows], CAPACITY_SCHEMA)
            capacity = _write(frame, out, "capacity")
        return _Part({"starvation": starvation, "capacity": capacity}, {
            "starvation": starved, "capacity": rows, "observed_peak": observed_peak(peaks),
        })

    # independent small jobs, each mostly the driver's planning: side by side they fill each
    # other's gaps (docs/performance.md, the report). Only the lifecycle's read sets a
    # session option (its listing on the driver: speed, not results)
    parts = side_by_side(spark, hourly, attempts_and_dead_letters, lifecycle,
                         starvation_and_capacity)  # fmt: skip
    return _assembled(page, parts)


def _assembled(page: PageData, parts: list[_Part]) -> PageData:
    """``page`` with every step's fields and tables: the one place the steps' output meets."""
    tables: dict[str, str] = {}
    fields: dict[str, Any] = {}
    for part in parts:
        tables.update(part.tables)
        fields.update(part.page)
    return replace(page, tables=tables, **fields)


def _publish_lifecycle(
    spark: SparkSession,
    store: Store,
    manifest: Manifest,
    out: Path,
    hours: list[int],
    rebuild: bool,
) -> str:
    """Rewrite the lifecycle partitions of ``hours`` (all, and nothing else, on a rebuild)."""
    from pyspark.sql import functions as F

    target = str(out / "lifecycle")
    chosen = sorted(int(h) for h in manifest.lifecycle) if rebuild else hours
    runs = {h: [manifest.lifecycle[str(h)]] for h in chosen if str(h) in manifest.lifecycle}
    stored = read_partitions(spark, store, "lifecycle", "enq_hour", runs)
    if stored is None:
        if rebuild:
            spark.range(0).select(F.lit(None).cast("string").alias("queue")).write.mode(
                "overwrite"
            ).parquet(target)
        return target
    parts = stored.withColumnRenamed("enq_key", "enq_hour")
    view = T.lifecycle_view(parts)
    if rebuild:
        view.write.mode("overwrite").partitionBy("enq_hour").parquet(target)
    else:  # the writer's option, not the session's: other tables are written meanwhile
        writer = view.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
        writer.partitionBy("enq_hour").parquet(target)
    return target


def _quantiles(hist: DataFrame, by: str) -> dict[tuple[int, str], list[float | None]]:
    """Per (priority, ``by``): p50/p95/p99 from the summed histogram (bounded rows)."""
    from pyspark.sql import functions as F

    summed = hist.groupBy("priority", by, "bucket").agg(F.sum("n").alias("n")).collect()
    counts: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for r in summed:
        counts.setdefault((int(r["priority"]), str(r[by])), []).append(
            (int(r["bucket"]), int(r["n"]))
        )
    return {k: histogram.quantiles(v, QUANTILES) for k, v in counts.items()}


def _priority_rows(
    per_hour: list[dict[str, Any]], quantiles: dict[tuple[int, str], list[float | None]]
) -> list[dict[str, Any]]:
    """The per-priority rows of the page: sums of the (priority, hour) rows, percentiles
    from the histograms."""
    summed = ("attempts", *OUTCOMES, "completed", "first_deliveries", "bytes")
    rows: dict[int, dict[str, Any]] = {}
    for r in per_hour:
        p = int(r["priority"])
        row = rows.setdefault(
            p, {"priority": p, **dict.fromkeys(summed, 0), "queues": set(),
                "first_settled_ms": None, "last_settled_ms": None},
        )  # fmt: skip
        for name in summed:
            row[name] += int(r[name] or 0)
        row["queues"] |= set(str(r["queues"]).split(", "))
        first, last = r["first_settled_ms"], r["last_settled_ms"]
        row["first_settled_ms"] = min(x for x in (row["first_settled_ms"], first) if x is not None)
        row["last_settled_ms"] = max(x for x in (row["last_settled_ms"], last) if x is not None)
    out = []
    for p in sorted(rows):
        row = rows[p]
        row["queues"] = ", ".join(sorted(row["queues"]))
        for o in OUTCOMES:
            row[f"{o}_rate"] = row[o] / row["attempts"] if row["attempts"] else None
        for metric in ("wait", "proc"):
            values = quantiles.get((p, metric), [None] * len(QUANTILES))
            for q, value in zip(T.PERCENTILES, values, strict=False):
                row[f"{metric}_p{round(q * 100)}_s"] = value
            row[f"{metric}_max_s"] = values[-1]
        row.update(hour=None, queue=None, level=T.LEVEL_PRIORITY)
        out.append(row)
    return out


def _in_system_rows(hist: DataFrame) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    quantiles = _quantiles(hist.withColumn("metric", F.lit("in_system")), "metric")
    return [
        {"priority": p, **{f"in_system_p{round(q * 100)}_s": v
                           for q, v in zip(T.PERCENTILES, values, strict=False)}}
        for (p, _), values in sorted(quantiles.items())
    ]  # fmt: skip


def _write(frame: DataFrame, out: Path, name: str) -> str:
    path = str(out / name)
    frame.write.mode("overwrite").parquet(path)
    return path


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in frame.collect()]


def _hourly_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chart points: the hour as epoch ms (the session and the page are both UTC)."""
    with_ms = [
        {**r, "hour_ms": int(r["hour"].replace(tzinfo=UTC).timestamp() * 1000)} for r in rows
    ]
    return sorted(with_ms, key=lambda r: (r["priority"], r["hour_ms"]))


def _top_reasons(dead: DataFrame) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    grouped = dead.groupBy("priority", "queue", "outcome", "reason").agg(
        F.sum("messages").alias("messages")
    )
    return _rows(grouped.orderBy(F.desc("messages"), "priority").limit(TOP_REASONS))
