"""``priority-pubsub report``: journal files in, Parquet tables and report.html out.

``run_report`` is the whole job; its command line is the CLI's ``report``
(``commands.report``). A run reads only the journal files no earlier run read (``files``),
brings the state up to date (``increment``), commits it with a manifest written last
(``state``) and rewrites the output from the state's summaries (``publish``): its cost
follows the new records, not the history. ``--full`` rebuilds the state from every
file. Only small aggregates reach the driver.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from priority_pubsub.analytics.increment import Increment, line_counts, run_increment
from priority_pubsub.analytics.journal.files import FileChoice, choose, local_new_bytes
from priority_pubsub.analytics.journal.load import LineCounts
from priority_pubsub.analytics.journal.objects import fetch, is_object_url, list_objects
from priority_pubsub.analytics.journal.schema import REPORT_FIELDS, SCHEMA_VERSION
from priority_pubsub.analytics.journal.window import SettleWindow, TimeBound
from priority_pubsub.analytics.model.capacity import CapacityRow
from priority_pubsub.analytics.model.starvation import StarvationRow
from priority_pubsub.analytics.publish import publish
from priority_pubsub.analytics.render.page import PageData, render
from priority_pubsub.analytics.render.progress import Progress, quiet_spark_options
from priority_pubsub.analytics.spark.jvm import (
    ClassArchive,
    java_options,
    jvm_stdout_to_stderr,
    quick_jit,
)
from priority_pubsub.analytics.spark.tuning import OWN_SESSION, Steps, tune_partitions
from priority_pubsub.analytics.state.store import (
    STATE_FORMAT,
    Manifest,
    StateError,
    Store,
    is_local,
    local_lock,
    new_run_id,
    read_local_manifest,
    remote_lock,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TARGET_WAIT_S = 60.0
WAIT_FIGURES = ("wait_p50_s", "wait_p95_s", "wait_p99_s", "wait_max_s")


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
    steps run side by side (the per-hour summaries beside the sweeps, the published tables
    beside each other) overlap, so they may add up to more than the run."""
    state_dir: str = ""
    full: bool = False
    files: dict[str, int] = field(default_factory=dict)
    """This run's files: new (read now), already_read, duplicates, changed, still_open."""
    records_read: int = 0
    """Lines read from this run's new files (every class)."""
    hours_recomputed: list[str] = field(default_factory=list)
    """The settle hours (UTC, ISO) whose per-hour rows this run recomputed."""
    priorities: list[dict[str, Any]] = field(default_factory=list)
    """Per priority: deliveries, wait p50/p95/p99 and the longest wait (``wait_max_s``)."""
    jvm: dict[str, str] = field(default_factory=dict)
    """The JVM this run started (``jvm``): ``jit`` quick or tiered, ``class_archive`` used,
    writing (for the next run), discarded (it failed to start) or off; {} when the session
    was given."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lines"]["bad"] = self.lines.bad
        return data


def run_report(
    journal_glob: str,
    out_dir: str,
    master: str = "local[*]",
    since: TimeBound = None,
    until: TimeBound = None,
    target_wait_s: float = DEFAULT_TARGET_WAIT_S,
    spark: SparkSession | None = None,
    state_dir: str | None = None,
    full: bool = False,
    progress: Progress | None = None,
    class_archive: ClassArchive | None = None,
) -> ReportSummary:
    """Bring the report up to date with the new journal files. Uses ``spark``, else the
    active session, else starts one on ``master`` (and stops it at the end; with
    ``class_archive``, its JVM uses or writes that archive: ``jvm``). ``out_dir`` is a
    local directory; ``state_dir`` (default ``<out>/.state``) any Hadoop path. Raises
    ``StateError`` when another run holds the state or it cannot be used as it is."""
    started = time.monotonic()
    window = SettleWindow.between(since, until)  # bad text fails before Spark
    out = Path(out_dir).absolute()
    state = state_dir or str(out / ".state")
    progress = progress or Progress()
    lock = local_lock(state) if is_local(state) else contextlib.nullcontext()
    with lock:  # before Spark starts: a second run is refused at once
        own = spark is None and _active_session() is None
        out.mkdir(parents=True, exist_ok=True)
        with progress.step("start Spark"):
            session = spark or _active_session()
            jvm: dict[str, str] = {}
            if session is None:
                new_bytes = _new_input_bytes(journal_glob, state, full)
                session, jvm = _start_own_session(master, out, new_bytes, class_archive)
        try:
            store = Store(session, state)
            with contextlib.nullcontext() if is_local(state) else remote_lock(store):
                run = _Run(session, store, out, progress, window)
                summary = run.report(journal_glob, target_wait_s, full)
                summary.jvm = jvm
        finally:
            if own:
                session.stop()
    summary.elapsed_s = round(time.monotonic() - started, 3)
    return summary


def _active_session() -> SparkSession | None:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def _new_input_bytes(journal_glob: str, state: str, full: bool) -> int | None:
    """What this run will read, sized before its JVM starts (local journals and state
    only; None otherwise)."""
    if not is_local(state):
        return None
    manifest = None if full else read_local_manifest(state)
    known = manifest.files if manifest is not None else {}
    return local_new_bytes(journal_glob, known)


def _start_own_session(
    master: str, out: Path, new_bytes: int | None, archive: ClassArchive | None
) -> tuple[SparkSession, dict[str, str]]:
    """``_start_session`` with the JVM options for this input (``jvm``), and what they were;
    a JVM that fails to start with the class archive is started again without it, and the
    archive deleted."""
    base = OWN_SESSION["spark.driver.extraJavaOptions"]
    jit = "quick" if quick_jit(new_bytes) else "tiered"
    try:
        session = _start_session(master, out, java_options(base, new_bytes, archive, out))
    except Exception:
        if archive is None or archive.used is None:
            raise
        archive.discard()
        session = _start_session(master, out, java_options(base, new_bytes, None, out))
        return session, {"jit": jit, "class_archive": "discarded"}
    if archive is None or not archive.writable:
        return session, {"jit": jit, "class_archive": "off"}
    return session, {"jit": jit, "class_archive": "writing" if archive.used is None else "used"}


def _start_session(
    master: str, out: Path | None = None, java: str | None = None
) -> SparkSession:
    from pyspark.sql import SparkSession

    own = dict(OWN_SESSION)
    if java is not None:
        own["spark.driver.extraJavaOptions"] = java
    settings: dict[str, bool | float | int | str | None] = dict(own)  # as pyspark asks
    if out is not None:  # Spark's own log into <out>/spark.log, not onto the terminal
        settings.update(quiet_spark_options(out, own))
    with jvm_stdout_to_stderr():  # the summary alone on stdout, whatever the JVM prints
        return (
            SparkSession.builder.master(master)
            .appName("priority-pubsub-report")
            .config(map=settings)
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )


@dataclass
class _Run:
    """One run against one state: choose files, increment, commit, publish, clean up."""

    spark: SparkSession
    store: Store
    out: Path
    progress: Progress
    window: SettleWindow

    def report(self, journal_glob: str, target_wait_s: float, full: bool) -> ReportSummary:
        spark, store = self.spark, self.store
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        steps = Steps(spark, listener=self.progress)
        with steps.step("read state"):
            manifest = self._usable_manifest(full)
            published = store.read_text("published") == str(manifest.seq)
            pending = [] if published else list(manifest.unpublished)
        with steps.step("find new files"):
            listing = None
            if is_object_url(journal_glob):
                driver_only(spark, journal_glob)
                listing = list_objects(journal_glob)
            choice = choose(spark, journal_glob, manifest.files, listing)
        self.progress.note(_files_line(choice))
        increment = Increment()
        started_from = manifest
        if choice.new:
            tune_partitions(spark, sum(f.size for f in choice.new))
            previous = Manifest.from_json(manifest.to_json())
            previous.unpublished = pending
            run = new_run_id(manifest.seq + 1)
            fetched = self.out / ".fetched"  # objects copied here for Spark, then deleted
            try:
                new = choice.new
                if listing is not None:
                    with steps.step("fetch new objects"):
                        new = fetch(choice.new, fetched / run)
                manifest, increment = run_increment(
                    spark, store, previous, new, run, self.window, steps
                )
            finally:
                shutil.rmtree(fetched, ignore_errors=True)
            manifest.format, manifest.journal_schema = STATE_FORMAT, SCHEMA_VERSION
            manifest.record_columns = list(REPORT_FIELDS)
            manifest.bounds = self.window.stored
            with steps.step("commit"):
                store.commit(manifest)
            pending = manifest.unpublished
        page = self._page(journal_glob, target_wait_s, manifest)
        page = publish(
            spark, store, manifest, self.out, page, steps, pending, full or manifest.seq == 1
        )
        store.write_text("published", str(manifest.seq))
        with steps.step("clean up state"):
            store.collect_garbage(manifest, started_from)
        html_path = self.out / "report.html"
        html_path.write_text(render(page), encoding="utf-8")
        return ReportSummary(
            out_dir=str(self.out),
            html_path=str(html_path),
            tables=page.tables,
            lines=page.counts,
            deliveries=page.counts.valid,
            messages=sum(int(r["messages"]) for r in page.attempts),
            first_ms=page.first_ms,
            last_ms=page.last_ms,
            starvation=page.starvation,
            capacity=page.capacity,
            observed_peak=page.observed_peak,
            workers_needed=page.capacity[-1].workers_needed if page.capacity else None,
            shuffle_partitions=_partitions(spark),
            steps_s=steps.seconds,
            state_dir=store.root,
            full=full,
            files=_file_counts(choice),
            records_read=increment.lines.total,
            hours_recomputed=[_iso_hour(h) for h in increment.hours],
            priorities=[
                {k: r[k] for k in ("priority", "attempts", *WAIT_FIGURES)} for r in page.summary
            ],
        )

    def _usable_manifest(self, full: bool) -> Manifest:
        """The state's manifest, or an empty one after wiping the state (``--full``)."""
        store = self.store
        if full:
            for name in ("data", "manifest", "published"):
                store.delete(name)
            return Manifest()
        manifest = store.load_manifest()
        if manifest.seq == 0:
            return manifest
        if manifest.format != STATE_FORMAT or manifest.journal_schema > SCHEMA_VERSION:
            raise StateError(
                f"the state in {store.root} was written by another version (state format "
                f"{manifest.format}, journal schema v{manifest.journal_schema}; this one reads "
                f"format {STATE_FORMAT}, schema up to v{SCHEMA_VERSION}): rerun with --full"
            )
        if manifest.record_columns != list(REPORT_FIELDS):
            raise StateError(
                f"the state in {store.root} keeps other record fields "
                f"({manifest.record_columns}): rerun with --full to rebuild it"
            )
        if manifest.bounds != self.window.stored:
            raise StateError(
                f"the state in {store.root} was built with other --since/--until bounds: "
                "rerun with --full, or give another --state"
            )
        return manifest

    def _page(self, journal_glob: str, target_wait_s: float, manifest: Manifest) -> PageData:
        since, until = self.window.since, self.window.until
        return PageData(
            source=journal_glob,
            generated_ms=int(time.time() * 1000),
            target_wait_s=target_wait_s,
            counts=line_counts(manifest),
            since=None if since is None else str(since),
            until=None if until is None else str(until),
        )


def driver_only(spark: SparkSession, journal_glob: str) -> None:
    """Objects are fetched to the driver's disk, which only a local master's executors
    share: on a cluster, the same prefix is read through Spark's own connector. Raises
    ``ValueError`` (bad usage) otherwise, before anything is listed."""
    master = str(spark.sparkContext.master)
    if not master.startswith("local"):
        raise ValueError(
            f"{journal_glob}: objects are fetched to the driver, which executors on "
            f"{master} cannot read; on a cluster read the prefix through Spark's connector "
            "(s3a://BUCKET/PREFIX/date=*/hour=*/*.jsonl.gz, gs://..., abfs://...), or run "
            "with --master 'local[*]'")


def _files_line(choice: FileChoice) -> str:
    skipped = choice.already_read + len(choice.duplicates) + len(choice.changed)
    text = f"{len(choice.new)} new journal file(s), {skipped} already read"
    if choice.still_open:
        text += f", {choice.still_open} still being written (.open, skipped)"
    if choice.changed:
        text += f"; CHANGED since read, skipped: {', '.join(choice.changed[:3])}"
    return text


def _file_counts(choice: FileChoice) -> dict[str, int]:
    return {
        "new": len(choice.new),
        "already_read": choice.already_read,
        "duplicates": len(choice.duplicates),
        "changed": len(choice.changed),
        "still_open": choice.still_open,
    }


def _iso_hour(hour_id: int) -> str:
    return datetime.fromtimestamp(hour_id * 3600, UTC).strftime("%Y-%m-%dT%H:00Z")


def _partitions(spark: SparkSession) -> int | None:
    value = spark.conf.get("spark.sql.shuffle.partitions", None)
    return int(value) if value else None
