"""``priority-pubsub report`` behind the CLI: what it checks before Spark starts, the run,
and what it prints.

The CLI declares the command's options once (``cli.report``); the ``spark-submit`` entry
(deploy/spark/report_job.py) runs that same command, so both take the same arguments.
Bad usage is said before Spark starts: a bad ``--since``/``--until`` (exit 2), a local path
that matches nothing or a missing pyspark (exit 1).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import sys

from priority_pubsub.analytics.journal.window import to_epoch_ms
from priority_pubsub.analytics.render.progress import Progress, TerminalProgress, human_summary
from priority_pubsub.analytics.report import run_report
from priority_pubsub.analytics.spark.jvm import class_archive
from priority_pubsub.analytics.state.store import StateError

SPARK_EXTRA = "priority-pubsub[spark]"


def run_report_command(
    journal_glob: str,
    out: str,
    *,
    master: str,
    since: str | None,
    until: str | None,
    target_wait_s: float,
    state: str | None,
    full: bool,
    as_json: bool,
) -> int:
    """One report run as the command line runs it (its options and their defaults are the
    CLI's, declared once there): 0 ok, 1 failed (or another run holds the
    state), 2 bad usage.

    On a terminal: each step with its time on stderr, then a short summary; with ``as_json``
    or when stdout is not a terminal: the summary as one JSON document (as scripts read it)."""
    try:
        for bound in (since, until):  # bad usage is exit 2, whatever the files
            to_epoch_ms(bound)
    except ValueError as exc:
        return _error(str(exc), 2)
    if (nothing := _matches_nothing(journal_glob)) is not None:
        return _error(nothing, 1)
    if importlib.util.find_spec("pyspark") is None:
        return _error(f"the report needs pyspark: pip install '{SPARK_EXTRA}'", 1)
    as_json = as_json or not sys.stdout.isatty()
    progress = Progress() if as_json or not sys.stderr.isatty() else TerminalProgress()
    archive = class_archive() if _starts_own_session() else None
    try:
        summary = run_report(
            journal_glob, out, master=master, since=since, until=until,
            target_wait_s=target_wait_s, state_dir=state, full=full, progress=progress,
            class_archive=archive,
        )  # fmt: skip
    except StateError as exc:  # another run holds the state, or it must be rebuilt
        return _error(str(exc), 1)
    except ValueError as exc:  # a bad --since/--until, an object URL on a cluster
        return _error(str(exc), 2)
    except Exception as exc:  # Spark's errors (e.g. no such path) arrive as many classes
        return _error(f"report failed: {_first_line(exc)}", 1)
    data = summary.to_dict()
    print(json.dumps(data, default=str) if as_json else human_summary(data), flush=True)
    if archive is not None and archive.used is None and archive.writable:
        with progress.step("save Spark's classes for the next run"):
            archive.finish()
    return 0


def _error(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _starts_own_session() -> bool:
    """Whether this process will start Spark's JVM itself (not under ``spark-submit``,
    whose JVM is already running with its own options)."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ


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
