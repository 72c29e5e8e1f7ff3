"""``priority-pubsub report``: journal files in, Parquet tables and report.html out.

``run_report`` is the whole job; ``main(argv)`` is its typer-free command line, also usable
with ``spark-submit -m``-style launchers. The job reads the journal once (cached), writes
the big tables straight from Spark, and collects only small aggregates to the driver for
the page.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from priority_pubsub.analytics import tables as T
from priority_pubsub.analytics.capacity import CapacityRow, capacity, max_in_flight, observed_peak
from priority_pubsub.analytics.frames import small_frame
from priority_pubsub.analytics.load import LineCounts, load
from priority_pubsub.analytics.page import PageData, render
from priority_pubsub.analytics.starvation import StarvationRow, collect_rows, starvation
from priority_pubsub.analytics.tuning import (
    ONE_RECORD_PER_GROUP,
    OWN_SESSION,
    Steps,
    cached,
    session_conf,
    tune,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_TARGET_WAIT_S = 60.0
SPARK_EXTRA = "priority-pubsub[spark]"
TimeBound = datetime | str | int | None
TOP_REASONS = 20


@dataclass
class ReportSummary:
    """What a run produced: where, how many lines of each kind, and the headline figures."""

    out_dir: str
    html_path: str
    tables: dict[str, str]
    lines: LineCounts
    deliveries: int
    messages: int
    first_ms: int | None
    last_ms: int | None
    starvation: list[StarvationRow] = field(default_factory=list)
    capacity: list[CapacityRow] = field(default_factory=list)
    observed_peak: int = 0
    workers_needed: int | None = None
    elapsed_s: float = 0.0
    shuffle_partitions: int | None = None
    steps_s: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each step (the Spark jobs of step X are described ``report: X``);
    starvation and capacity run side by side, so their times overlap."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lines"]["bad"] = self.lines.bad
        return data


def to_epoch_ms(bound: TimeBound) -> int | None:
    """ISO 8601 text (naive = UTC, 'Z' allowed), an aware/naive datetime, or epoch ms."""
    if bound is None or isinstance(bound, int):
        return bound
    if isinstance(bound, str):
        bound = datetime.fromisoformat(bound.strip().replace("Z", "+00:00"))
    if bound.tzinfo is None:
        bound = bound.replace(tzinfo=UTC)
    return int(bound.timestamp() * 1000)


def run_report(
    journal_glob: str,
    out_dir: str,
    master: str = "local[*]",
    since: TimeBound = None,
    until: TimeBound = None,
    target_wait_s: float = DEFAULT_TARGET_WAIT_S,
    spark: SparkSession | None = None,
) -> ReportSummary:
    """Run the whole report. Uses ``spark``, else the active session, else starts one on
    ``master`` (and stops it at the end). ``out_dir`` is a local directory."""
    started = time.monotonic()
    since_ms, until_ms = to_epoch_ms(since), to_epoch_ms(until)  # bad text fails before Spark
    own = spark is None and _active_session() is None
    session = spark or _active_session() or _start_session(master)
    try:
        bounds = (since_ms, until_ms, since, until)
        summary = _run(session, journal_glob, out_dir, bounds, target_wait_s)
    finally:
        if own:
            session.stop()
    summary.elapsed_s = round(time.monotonic() - started, 3)
    return summary


def _active_session() -> SparkSession | None:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def _start_session(master: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName("priority-pubsub-report")
        .config(map=dict(OWN_SESSION))  # a copy typed as pyspark asks
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def _run(
    spark: SparkSession,
    journal_glob: str,
    out_dir: str,
    bounds: tuple[int | None, int | None, TimeBound, TimeBound],
    target_wait_s: float,
) -> ReportSummary:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    partitions = tune(spark, journal_glob)
    steps = Steps(spark)
    out = Path(out_dir).absolute()
    out.mkdir(parents=True, exist_ok=True)
    since_ms, until_ms, since, until = bounds
    with steps.step("parse and cache"):
        loaded = load(spark, journal_glob, since_ms, until_ms, derive=T.with_derived)
    try:
        page = PageData(
            source=journal_glob,
            generated_ms=int(time.time() * 1000),
            target_wait_s=target_wait_s,
            counts=loaded.counts,
            since=None if since is None else str(since),
            until=None if until is None else str(until),
        )
        _fill(spark, loaded.valid, out, page, steps)
    finally:
        loaded.release()
    html_path = out / "report.html"
    html_path.write_text(render(page), encoding="utf-8")
    return ReportSummary(
        out_dir=str(out),
        html_path=str(html_path),
        tables=page.tables,
        lines=loaded.counts,
        deliveries=loaded.counts.valid,
        messages=sum(int(r["messages"]) for r in page.attempts),
        first_ms=page.first_ms,
        last_ms=page.last_ms,
        starvation=page.starvation,
        capacity=page.capacity,
        observed_peak=page.observed_peak,
        workers_needed=page.capacity[-1].workers_needed if page.capacity else None,
        shuffle_partitions=partitions,
        steps_s=steps.seconds,
    )


def _fill(spark: SparkSession, derived: DataFrame, out: Path, page: PageData, steps: Steps) -> None:
    """Write every table, then read back (small) what the page shows. Each step is one or
    two Spark jobs over the cached frames; nothing collected grows with the record count.
    The rollup is cached only for the two steps that read it."""
    from pyspark.sql import functions as F

    with cached(T.fine_groups(derived)) as fine:
        with cached(T.rollup(derived, fine)) as rolled:
            with steps.step("rollup"):
                coarse = _rows(rolled.where(F.col("level") != T.LEVEL_HOURLY))
            with steps.step("hourly"):
                paths = {"hourly": _write(T.hourly(rolled), out, "hourly")}
        page.summary = sorted(
            (r for r in coarse if r["level"] == T.LEVEL_PRIORITY), key=lambda r: r["priority"]
        )
        page.hourly = _hourly_rows([r for r in coarse if r["level"] == T.LEVEL_PRIORITY_HOUR])
        page.first_ms = min((r["first_settled_ms"] for r in page.summary), default=None)
        page.last_ms = max((r["last_settled_ms"] for r in page.summary), default=None)
        with steps.step("attempts"):
            paths["attempts"] = _write(T.attempts_distribution(derived, fine), out, "attempts")
        with steps.step("dead letters"):
            paths["dead_letters"] = _write(T.dead_letters(derived, fine), out, "dead_letters")
            page.reasons = _top_reasons(spark.read.parquet(paths["dead_letters"]))
        with steps.step("lifecycle"):
            with session_conf(spark, ONE_RECORD_PER_GROUP):  # one group per message
                paths["lifecycle"] = _write(T.lifecycle(derived), out, "lifecycle")
            life = spark.read.parquet(paths["lifecycle"])
            page.in_system = _rows(T.time_in_system(life))
            page.attempts = _rows(T.lifecycle_summary(life))

        priorities = [int(r["priority"]) for r in page.summary]

        def starvation_step() -> None:
            with steps.step("starvation"):
                path = _write(starvation(spark, derived, priorities), out, "starvation")
                page.starvation = collect_rows(spark.read.parquet(path))
                paths["starvation"] = path

        def capacity_step() -> None:
            with steps.step("capacity"):
                peaks = max_in_flight(derived, priorities)
                page.capacity = capacity(derived, page.target_wait_s, peaks, fine)
                page.observed_peak = observed_peak(peaks)
                rows = [asdict(c) for c in page.capacity]
                paths["capacity"] = _write_rows(spark, rows, out, "capacity")

        _side_by_side(spark, starvation_step, capacity_step)
    page.tables = paths


def _side_by_side(spark: SparkSession, *steps: Callable[[], None]) -> None:
    """Run independent steps at once, one driver thread each; raise the first failure.

    Why. Each large stage already keeps every core busy, but between stages the driver
    works alone: it plans, compiles generated code and runs one-task stages, while the
    executors wait. Two steps in two threads fill those gaps with each other's tasks (1 M
    records, 2 cores: starvation and capacity took 6.7 s one after the other on a fresh
    JVM, 5.7-6.3 s side by side; the report 22.3 -> 19.9-20.9 s). Only for steps that set
    nothing on the session (``session_conf`` is session-wide: a setting made for one step
    would reach the jobs the other plans meanwhile). ``inheritable_thread_target`` gives
    each thread its own JVM thread and job properties (PySpark's pinned thread mode), so
    each step's jobs keep their ``report: <step>`` description."""
    from concurrent.futures import ThreadPoolExecutor

    import pyspark

    def pinned(step: Callable[[], None]) -> Callable[[], None]:
        # PySpark >= 4 takes the session (its tags are inherited too), 3.5 the function. A
        # wrapper per step: one wrapper shares one copy of the properties between threads,
        # so a job description set in one step would show on the other's jobs.
        if int(pyspark.__version__.split(".")[0]) >= 4:
            return pyspark.inheritable_thread_target(spark)(step)
        return pyspark.inheritable_thread_target(step)

    with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="report-step") as pool:
        futures = [pool.submit(pinned(step)) for step in steps]
        for future in futures:
            future.result()


def _write(frame: DataFrame, out: Path, name: str) -> str:
    path = str(out / name)
    frame.write.mode("overwrite").parquet(path)
    return path


def _write_rows(spark: SparkSession, rows: list[dict[str, Any]], out: Path, name: str) -> str:
    schema = (
        "priority int, deliveries long, arrival_rate_per_s double, mean_service_s double, "
        "offered_load double, cumulative_load double, workers_needed int, "
        "observed_max_in_flight int, observed_mean_in_flight double"
    )
    return _write(small_frame(spark, rows, schema), out, name)


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="priority-pubsub report",
        description="Delivery report over journal files: Parquet tables and report.html.",
    )
    parser.add_argument("journal_glob", help="journal files: path, glob or Hadoop URI (.gz ok)")
    parser.add_argument("--out", required=True, help="output directory (local)")
    parser.add_argument("--master", default="local[*]", help="Spark master URL")
    parser.add_argument("--since", help="first settle time, ISO 8601 (UTC if no zone)")
    parser.add_argument("--until", help="settle time bound (exclusive), ISO 8601")
    parser.add_argument(
        "--target-wait-s",
        type=float,
        default=DEFAULT_TARGET_WAIT_S,
        help="p95 wait the capacity figures aim for, seconds",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: prints the summary as one JSON document; 0 ok, 1 failed, 2 bad usage."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        for bound in (args.since, args.until):  # bad usage is exit 2, whatever the files
            to_epoch_ms(bound)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if (nothing := _matches_nothing(args.journal_glob)) is not None:
        print(f"error: {nothing}", file=sys.stderr)
        return 1
    if importlib.util.find_spec("pyspark") is None:
        print(f"error: the report needs pyspark: pip install '{SPARK_EXTRA}'", file=sys.stderr)
        return 1
    try:
        summary = run_report(
            args.journal_glob,
            args.out,
            master=args.master,
            since=args.since,
            until=args.until,
            target_wait_s=args.target_wait_s,
        )
    except ValueError as exc:  # a bad --since/--until
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # Spark's errors (e.g. no such path) arrive as many classes
        print(f"error: report failed: {_first_line(exc)}", file=sys.stderr)
        return 1
    print(json.dumps(summary.to_dict(), default=str))
    return 0


def _matches_nothing(journal_glob: str) -> str | None:
    """A local path or glob that matches no file, said plainly before Spark starts (Spark's
    own message is a stack of Java frames). URIs and Hadoop's ``{a,b}`` are left to Spark."""
    if "://" in journal_glob or "{" in journal_glob:
        return None
    if glob.glob(os.path.expanduser(journal_glob)):
        return None
    return f"no journal files match {journal_glob!r} (relative to {os.getcwd()})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


if __name__ == "__main__":
    raise SystemExit(main())
