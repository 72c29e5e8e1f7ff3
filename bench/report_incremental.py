"""The incremental case of ``bench.bench_report``: new records on top of a history.

    python -m bench.bench_report --incremental [--history 1000000,10000000] [--new 100000]
                                 [--rounds 3] [--full-rounds 1] [--keep DIR]

For each history size, Spark writes a history of that many records spread over 30 days
(journal files ``journal-hist-<seq>.jsonl``) and ``--new`` records in the hour after it
(``journal-new-<seq>.jsonl``). Then, each run a fresh ``priority-pubsub report`` process
(``python -m priority_pubsub.analytics.report``: its own JVM, timed end to end, as an
operator's hourly run):

- ``full_s``: the state built from the history alone (``--full``, ``--full-rounds`` runs);
- ``incremental_s``: the new files on top of that state (a fresh copy of it each round);
- ``duckdb_s``: DuckDB's core aggregates over the same new files
  (``bench.duckdb_reference``, as many rounds).

Medians of the rounds; the machine's load average is printed beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOUR_MS = 3_600_000
HISTORY_DAYS = 30
RECORDS_PER_FILE = 250_000
"""About a 64 MB journal file (the sidecar's default rotation)."""


def write_journal(
    spark: SparkSession, n: int, start_ms: int, span_ms: int, first_id: int, directory: Path,
    name: str,
) -> None:
    """``n`` records enqueued evenly over [start, start + span), as journal files."""
    from pyspark.sql import functions as F

    from bench.bench_report import record_columns
    from priority_pubsub.telemetry.journal import JOURNAL_FIELDS

    columns = record_columns(n, start_ms, span_ms, first_id)
    record = F.struct(*(columns[f.name].alias(f.name) for f in JOURNAL_FIELDS))
    parts = max(1, n // RECORDS_PER_FILE)
    staging = directory / f".{name}-staging"
    frame = spark.range(first_id, first_id + n, numPartitions=parts)
    frame.select(F.to_json(record).alias("value")).write.mode("overwrite").text(str(staging))
    directory.mkdir(parents=True, exist_ok=True)
    for seq, part in enumerate(sorted(staging.glob("part-*")), start=1):
        part.rename(directory / f"journal-{name}-{seq:06d}.jsonl")
    shutil.rmtree(staging)


def report_process(
    journals: str, out: Path, state: Path, full: bool, driver_memory: str = "4g"
) -> tuple[float, dict[str, Any]]:
    """One ``priority-pubsub report`` in a fresh process; (wall seconds, its summary). Its
    JVM gets ``driver_memory`` (as the in-session bench's), through PYSPARK_SUBMIT_ARGS."""
    command = [sys.executable, "-m", "priority_pubsub.analytics.report", journals,
               "--out", str(out), "--state", str(state), "--master", "local[2]", "--json",
               *(["--full"] if full else [])]  # fmt: skip
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-memory {driver_memory} pyspark-shell"}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"report failed: {done.stderr[-2000:]}")
    return took, json.loads(done.stdout)


def bench_history(
    spark: SparkSession, history: int, new: int, work: Path, rounds: int, full_rounds: int,
    driver_memory: str = "4g",
) -> dict[str, Any]:
    from bench.bench_report import T0, _reference

    base = work / f"history-{history}"
    journals = base / "journals"
    span = HISTORY_DAYS * 24 * HOUR_MS - HOUR_MS
    started = time.monotonic()
    write_journal(spark, history, T0, span, 0, journals, "hist")
    write_journal(spark, new, T0 + span, HOUR_MS, history, base / "new", "new")
    generate_s = time.monotonic() - started
    state = base / "state"
    full_runs: list[float] = []
    full_steps: dict[str, float] = {}
    for _ in range(max(1, full_rounds)):
        took, summary = report_process(
            str(journals), base / "out", state, full=True, driver_memory=driver_memory
        )
        assert summary["lines"]["valid"] == history, summary["lines"]
        full_runs.append(took)
        full_steps = summary["steps_s"]
        log(f"{history:,} history, full rebuild: {took:.1f} s")
    for path in (base / "new").iterdir():
        shutil.copy(path, journals / path.name)
    incremental_runs, summaries = [], []
    for _ in range(rounds):
        copy = base / "state-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(state, copy)
        took, summary = report_process(
            str(journals), base / "out", copy, full=False, driver_memory=driver_memory
        )
        assert summary["records_read"] == new, summary
        incremental_runs.append(took)
        summaries.append(summary)
        log(f"{history:,} history + {new:,} new: {took:.1f} s")
    reference = _reference(str(base / "new" / "journal-new-*.jsonl"), 2, rounds)
    middle = summaries[incremental_runs.index(statistics.median_low(incremental_runs))]
    return {
        "history": history,
        "new": new,
        "generate_s": round(generate_s, 1),
        "driver_memory": driver_memory,
        "full_steps_s": full_steps,
        "full_s": round(statistics.median(full_runs), 2),
        "full_rounds_s": [round(x, 2) for x in full_runs],
        "incremental_s": round(statistics.median(incremental_runs), 2),
        "incremental_rounds_s": [round(x, 2) for x in incremental_runs],
        "incremental_steps_s": middle["steps_s"],
        "hours_recomputed": len(middle["hours_recomputed"]),
        "duckdb_s": reference["total_s"] if reference else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
