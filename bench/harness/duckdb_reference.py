"""The DuckDB reference row of the report benchmarks: the core aggregates, in DuckDB.

Same files, same schema (``JOURNAL_FIELDS``, given explicitly, no inference), same
definitions as ``priority_pubsub.analytics.model.tables``: per (priority, hour) attempts and
outcome counts, wait (attempt 1) and processing p50/p95/p99, the attempts distribution and
the dead-letter reasons. It is the yardstick for "how long should these aggregates take on
this machine", not a second report: the Spark report computes more (lifecycle, starvation,
capacity) and writes Parquet. DuckDB is a dev/bench dependency only.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

from bench.harness.output import log
from bench.harness.stats import median_run
from priority_pubsub.telemetry.journal import JOURNAL_FIELDS

DUCK_TYPES = {"int": "INTEGER", "long": "BIGINT", "double": "DOUBLE", "string": "VARCHAR"}

CORE_QUERIES = {
    "hourly": """
        SELECT priority, date_trunc('hour', make_timestamp(settled_ms * 1000)) AS hour,
               count(*) AS attempts,
               count(*) FILTER (outcome = 'ack') AS ack,
               count(*) FILTER (outcome = 'retry') AS retry,
               count(*) FILTER (outcome = 'dead') AS dead,
               count(*) FILTER (outcome = 'drop') AS "drop",
               quantile_cont(CASE WHEN attempt = 1 THEN (received_ms - enqueued_ms) / 1000.0
                             END, [0.5, 0.95, 0.99]) AS wait_s,
               quantile_cont((settled_ms - forwarded_ms) / 1000.0, [0.5, 0.95, 0.99]) AS proc_s
        FROM journal GROUP BY ALL""",
    "attempts": "SELECT priority, attempt, count(*) AS deliveries FROM journal GROUP BY ALL",
    "dead_letters": """
        SELECT priority, outcome, coalesce(reason, '(no reason given)') AS reason,
               count(*) AS messages
        FROM journal WHERE outcome IN ('dead', 'drop') GROUP BY ALL""",
}


def duckdb_reference(journal_glob: str, threads: int | None = None) -> dict[str, Any]:
    """Load the JSON lines into a table once, then run ``CORE_QUERIES``; seconds of each."""
    import duckdb

    columns = ", ".join(f"'{f.name}': '{DUCK_TYPES[f.type]}'" for f in JOURNAL_FIELDS)
    connection = duckdb.connect()
    if threads:
        connection.execute(f"SET threads = {int(threads)}")
    started = time.monotonic()
    connection.execute(
        "CREATE TABLE journal AS SELECT * FROM read_json(?, format = 'newline_delimited', "
        f"columns = {{{columns}}})",
        [journal_glob],
    )
    load_s = time.monotonic() - started
    rows: dict[str, int] = {}
    for name, query in CORE_QUERIES.items():
        rows[name] = len(connection.execute(query).fetchall())
    total_s = time.monotonic() - started
    records = connection.execute("SELECT count(*) FROM journal").fetchone()
    connection.close()
    return {
        "engine": f"duckdb {duckdb.__version__}",
        "records": int(records[0]) if records else 0,
        "load_s": round(load_s, 3),
        "total_s": round(total_s, 3),
        "rows": rows,
    }


def reference_rounds(files: str, threads: int, rounds: int = 1) -> dict[str, Any] | None:
    """DuckDB on the same files with ``threads`` threads (as many as Spark has cores): the
    run of median total time of ``rounds`` (None: no duckdb)."""
    if importlib.util.find_spec("duckdb") is None:
        log("duckdb is not installed: no reference row (pip install -e '.[dev]')")
        return None
    results = [duckdb_reference(files, threads=threads) for _ in range(max(1, rounds))]
    result = median_run(results, key=lambda r: float(r["total_s"]))
    assert result is not None  # at least one round
    assert result["records"] > 0, result
    return {**result, "rounds_total_s": sorted(r["total_s"] for r in results)}
