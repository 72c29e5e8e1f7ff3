"""What a person running ``priority-pubsub report`` on a terminal sees.

Each step shows while it runs (a spinner with its name) and stays as one line with its
wall time once done; Spark's own log goes to ``<out>/spark.log`` (a log4j2 configuration
given to the JVM the report starts), never to the terminal; and the run ends with a few
lines a person reads at a glance. Scripts get the JSON summary instead (``--json``, or
whenever stdout is not a terminal).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""
MAX_TO_STRING_FIELDS = "1000"
"""Plans with more fields than Spark's default 25 made it warn "Truncated the string
representation of a plan" (the rollup has ~40 columns); the plans are only logged."""


class Progress:
    """Silent: the steps of a run called from code (tests, notebooks, the bench)."""

    def __call__(self, name: str, seconds: float | None) -> None:
        return None

    def note(self, text: str) -> None:
        return None

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """A step outside Spark's jobs (starting Spark itself)."""
        self(name, None)
        started = time.monotonic()
        try:
            yield
        finally:
            self(name, time.monotonic() - started)


class TerminalProgress(Progress):
    """A spinner while a step runs, then a line with its time (on stderr)."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console

        self._console = console or Console(stderr=True)
        self._status: Status | None = None

    def __call__(self, name: str, seconds: float | None) -> None:
        if seconds is None:
            self._stop()
            self._status = self._console.status(f"{name} ...")
            self._status.start()
            return
        self._stop()
        self._console.print(f"  [green]done[/green] {name:<34} {seconds:7.1f} s")

    def note(self, text: str) -> None:
        self._console.print(f"  {text}")

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def quiet_spark_options(out: Path, settings: Mapping[str, str]) -> dict[str, str]:
    """JVM options sending Spark's log to ``<out>/spark.log`` (added to ``settings``'
    ``spark.driver.extraJavaOptions``), and no "Truncated the string" warning."""
    config = out / ".spark-log4j2.properties"
    config.write_text(LOG4J2.format(log=out / "spark.log"), encoding="utf-8")
    java = settings.get("spark.driver.extraJavaOptions", "")
    return {
        "spark.driver.extraJavaOptions": f"{java} -Dlog4j2.configurationFile={config}".strip(),
        "spark.sql.debug.maxToStringFields": MAX_TO_STRING_FIELDS,
    }


def human_summary(summary: Mapping[str, Any]) -> str:
    """A few lines: what was read, what changed, the worst waits, where the page is."""
    lines = summary["lines"]
    files = summary.get("files", {})
    hours = summary.get("hours_recomputed", [])
    out = [
        f"Read {summary.get('records_read', 0):,} journal lines from {files.get('new', 0)} "
        f"new file(s) ({files.get('already_read', 0)} already read"
        + (f", {files['duplicates']} duplicate(s) skipped" if files.get("duplicates") else "")
        + ").",
        f"Hours recomputed: {len(hours)}"
        + (f" ({hours[0]} .. {hours[-1]})" if hours else "")
        + f"; in all {lines['valid']:,} deliveries of {summary['messages']:,} messages"
        + (f", {lines['bad']:,} bad lines" if lines.get("bad") else "")
        + ".",
    ]
    for row in summary.get("priorities", []):
        out.append(
            f"  priority {row['priority']}: wait p95 {_duration(row.get('wait_p95_s'))}, "
            f"worst {_duration(row.get('wait_max_s'))}"
        )
    for row in summary.get("starvation", []):
        if row["windows"]:
            out.append(
                f"  priority {row['priority']} starved {row['windows']} time(s), longest "
                f"{_duration(row['duration_s'])}"
            )
    out.append(f"Report: {summary['html_path']} (took {summary['elapsed_s']:.1f} s)")
    return "\n".join(out)


def _duration(seconds: float | None) -> str:
    from priority_pubsub.analytics.render.page import duration

    return duration(seconds)
