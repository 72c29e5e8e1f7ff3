"""Benchmark of the delivery report: records per second for generated journals (not a test).

    python -m bench.bench_report [--sizes 1000000,10000000] [--rounds 3] [--master local[*]]
                                 [--keep DIR] [--event-log DIR]

For each size, Spark itself writes a journal of that many records (one JSON line each, three
priorities over 24 hours, realistic outcome mix and ~10 % second attempts), then the whole
report runs on it ``--rounds`` times in the same session and is timed (Spark start-up
excluded: one session for all sizes), and the reference row times DuckDB computing the
report's core aggregates on the same files (``bench.harness.duckdb_reference``, median of as many
rounds; skipped if duckdb is not installed); ``ratio`` is Spark's time over DuckDB's.

``report_s`` is the first run: what one ``priority-pubsub report`` costs, on a JVM that has
compiled none of Spark's code yet (``fresh_jvm``: the first size only; later sizes find it
warmed by the smaller ones).
``warm_report_s`` is the median of the later runs, on the same JVM after the first: the
difference is the JVM's just-in-time compilation, not the report's work. ``steps_s`` gives
each report step's wall time; ``--event-log`` also keeps Spark's event log (every job is
described ``report: <step>``, so its stages can be read per step in the Spark history
server). Prints one JSON document on stdout and a short table on stderr
(``bench.harness.output.emit``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness.duckdb_reference import reference_rounds
from bench.harness.journal_records import record_columns
from bench.harness.output import emit, log
from bench.harness.rendering import Rendering, Rows, met
from bench.harness.stats import median_run
from priority_pubsub.analytics.report import run_report
from priority_pubsub.analytics.spark.tuning import OWN_SESSION
from priority_pubsub.telemetry.journal import JOURNAL_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

def generate(spark: SparkSession, n: int, directory: Path) -> float:
    from pyspark.sql import functions as F

    started = time.monotonic()
    columns = record_columns(n)
    record = F.struct(*(columns[f.name].alias(f.name) for f in JOURNAL_FIELDS))
    frame = spark.range(n, numPartitions=max(2, n // 500_000))
    frame.select(F.to_json(record).alias("value")).write.mode("overwrite").text(str(directory))
    return time.monotonic() - started


def bench(spark: SparkSession, n: int, work: Path, rounds: int = 1) -> dict[str, Any]:
    journal = work / f"journal-{n}"
    generate_s = generate(spark, n, journal)
    size = sum(p.stat().st_size for p in journal.glob("part-*"))
    files = str(journal / "part-*")
    runs = [  # each a whole report: a rebuild (the state of the round before is wiped)
        run_report(files, str(work / f"report-{n}"), spark=spark, full=True)
        for _ in range(rounds)
    ]
    for summary in runs:
        assert summary.lines.valid == n, summary.lines
    first, warm = runs[0], median_run(runs[1:], key=lambda s: s.elapsed_s)
    reference = reference_rounds(files, spark.sparkContext.defaultParallelism, rounds)
    duck_s = reference["total_s"] if reference else None
    return {
        "records": n,
        "input_mb": round(size / 1e6, 1),
        "generate_s": round(generate_s, 1),
        "report_s": first.elapsed_s,
        "records_per_s": round(n / first.elapsed_s),
        "warm_report_s": warm.elapsed_s if warm else None,
        "warm_rounds_s": [s.elapsed_s for s in runs[1:]],
        "messages": first.messages,
        "workers_needed": first.workers_needed,
        "shuffle_partitions": first.shuffle_partitions,
        "steps_s": first.steps_s,
        "warm_steps_s": warm.steps_s if warm else None,
        "reference": reference,
        "ratio_to_reference": round(first.elapsed_s / duck_s, 1) if duck_s else None,
        "warm_ratio_to_reference": round(warm.elapsed_s / duck_s, 1) if warm and duck_s else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument(
        "--rounds", type=int, default=3, help="report runs per size: the first, then warm ones"
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--keep", type=Path, help="write journals and reports here")
    parser.add_argument("--event-log", type=Path, help="keep Spark's event log in this directory")
    parser.add_argument(
        "--incremental", action="store_true",
        help="the incremental case instead (bench.report_incremental and its options: --new "
        "records on top of each --history size, a fresh report process per run)",
    )  # fmt: skip
    argv = sys.argv[1:] if argv is None else argv
    if "--incremental" in argv:
        return _incremental(argv)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(args.master)
        .appName("priority-pubsub-bench")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    builder = builder.config(map=OWN_SESSION)  # the JVM the report would start for itself
    if args.event_log:
        args.event_log.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.eventLog.enabled", "true").config(
            "spark.eventLog.dir", str(args.event_log.absolute())
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        work = args.keep or Path(tmp)
        for n in (int(s) for s in args.sizes.split(",")):
            results.append({**bench(spark, n, work, args.rounds), "fresh_jvm": not results})
            log(f"{n:,} records: {results[-1]['records_per_s']:,} records/s")
    spark.stop()
    rows = [
        [
            r["records"],
            r["input_mb"],
            r["generate_s"],
            r["report_s"],
            r["warm_report_s"],
            r["records_per_s"],
            r["reference"]["total_s"] if r["reference"] else None,
            r["ratio_to_reference"],
        ]
        for r in results
    ]
    headers = ["records", "input MB", "generate s", "report s", "warm s", "records/s",
               "duckdb s", "ratio"]
    load = os.getloadavg()
    emit(
        "bench_report",
        {"master": args.master, "load_average": [round(x, 2) for x in load], "results": results},
        headers,
        rows,
    )
    return 0


def _incremental(argv: list[str]) -> int:
    """``bench.report_incremental`` with the same options (its own sessions and processes)."""
    from bench.report_incremental import add_arguments, emit_results, run

    parser = argparse.ArgumentParser(description="bench_report --incremental")
    parser.add_argument("--incremental", action="store_true")
    add_arguments(parser)
    emit_results(run(parser.parse_args(argv)), name="bench_report")
    return 0


SPARK_LIMITS_S = {1_000_000: 10.0, 10_000_000: 90.0}


def targets(result: dict[str, Any]) -> Rows:
    rows: Rows = []
    for r in result.get("results", []):
        n = r["records"]
        if n in SPARK_LIMITS_S:
            warm = r.get("warm_report_s")
            first = ("first run of the JVM" if r.get("fresh_jvm") else
                     "first run at this size, on the JVM the smaller size warmed")
            rows.append([f"Spark report {n // 1_000_000} M records <= "
                         f"{SPARK_LIMITS_S[n]:g} s ({first}"
                         + (f"; later runs: median {warm} s" if warm else "") + ")",
                         r["report_s"], met(SPARK_LIMITS_S[n], r["report_s"])])
        rows.append([f"Spark report {n:,} records <= 10x DuckDB (DuckDB "
                     f"{r['reference']['total_s'] if r.get('reference') else '-'} s)",
                     r["ratio_to_reference"], met(10, r["ratio_to_reference"])])
    return rows


RENDERING = Rendering(targets=targets)


if __name__ == "__main__":
    sys.exit(main())
