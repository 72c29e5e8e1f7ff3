"""Incremental runs: fed in pieces (late, out of order, duplicated), the tables equal one full
run's; a run killed by kill -9 and rerun equals a clean run; a second run at once is refused."""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from priority_pubsub.analytics.report import ReportSummary, run_report
from priority_pubsub.analytics.state.store import Manifest, StateError, local_lock
from priority_pubsub.analytics.state.stored import HOURLY, SUMMARIES
from priority_pubsub.cli import report_command_line
from priority_pubsub.telemetry.journal import JournalRecord
from tests.spark import expect, journals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
TABLES = ("hourly", "attempts", "dead_letters", "lifecycle", "starvation", "capacity")
PERCENTILE_COLUMNS = {f"{k}_p{p}_s" for k in ("wait", "proc") for p in (50, 95, 99)}


def random_journal(seed: int, messages: int = 600) -> list[JournalRecord]:
    """Messages of three priorities over four hours; waits up to 20 minutes (enqueued in one
    hour, settled in the next), a fifth retried once, some dead or dropped."""
    rng = random.Random(seed)
    out: list[JournalRecord] = []
    for i in range(messages):
        p = rng.choice((0, 0, 1, 1, 2))
        enq = journals.T0 + rng.randrange(4 * journals.HOUR_MS)
        recv = enq + int(rng.expovariate(1 / (2_000 * (p + 1) ** 3)))
        settled = recv + 5 + rng.randrange(3_000)
        outcome = rng.choice(("ack",) * 12 + ("dead", "drop"))
        if rng.random() < 0.2:
            out.append(journals.record(f"m{i}", p, enq, recv, settled, outcome="retry",
                                       reason="status 503", status=503))  # fmt: skip
            recv = settled + rng.randrange(1_000, 60_000)
            settled = recv + 5 + rng.randrange(3_000)
            out.append(journals.record(f"m{i}", p, enq, recv, settled, attempt=2,
                                       outcome=outcome, reason=f"because {outcome}"))  # fmt: skip
        else:
            out.append(journals.record(f"m{i}", p, enq, recv, settled, outcome=outcome,
                                       reason=f"because {outcome}"))  # fmt: skip
    return out


def arrivals(records: list[JournalRecord], seed: int) -> list[list[tuple[str, list[Any]]]]:
    """Files per increment: two replicas' files by settle hour, shuffled inside (out of
    order); replica b's first hours arrive only with the last increment (late)."""
    rng = random.Random(seed)
    files: dict[tuple[str, int], list[JournalRecord]] = {}
    for r in records:
        replica = "a" if int(r.message_id[1:]) % 2 else "b"
        files.setdefault((replica, (r.settled_ms - journals.T0) // journals.HOUR_MS), []).append(r)
    for chunk in files.values():
        rng.shuffle(chunk)
    increments: list[list[tuple[str, list[Any]]]] = [[], [], []]
    for (replica, hour), chunk in sorted(files.items()):
        name = f"journal-{replica}-{hour + 1:06d}.jsonl"
        late = replica == "b" and hour < 2
        increments[2 if late else min(hour // 2, 1)].append((name, chunk))
    return increments


def tables(spark: SparkSession, summary: ReportSummary) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name in TABLES:
        rows = [r.asDict() for r in spark.read.parquet(summary.tables[name]).collect()]
        out[name] = sorted(rows, key=lambda r: tuple(str(r[k]) for k in sorted(r)))
    return out


def assert_same_tables(
    got: dict[str, list[dict[str, Any]]], want: dict[str, list[dict[str, Any]]]
) -> None:
    for name in TABLES:
        assert len(got[name]) == len(want[name]), name
        for g, w in zip(got[name], want[name], strict=True):
            assert set(g) == set(w), name
            for column, value in w.items():
                if isinstance(value, float):
                    assert g[column] == pytest.approx(value, rel=1e-9), (name, column)
                else:
                    assert g[column] == value, (name, column, w)


def assert_same_summary(got: ReportSummary, want: ReportSummary) -> None:
    assert got.lines == want.lines
    assert (got.deliveries, got.messages) == (want.deliveries, want.messages)
    assert got.priorities == want.priorities  # from summed histograms: exactly equal
    assert got.starvation == want.starvation


@pytest.fixture(scope="module")
def fed(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[JournalRecord], ReportSummary, list[ReportSummary], Path]:
    base = tmp_path_factory.mktemp("incremental")
    records = random_journal(seed=31)
    incoming = base / "journals"
    runs = []
    for n, increment in enumerate(arrivals(records, seed=31)):
        for name, chunk in increment:
            journals.write(incoming / name, chunk)
        if n == 1:  # a copy of a file already read, under another name
            shutil.copy(incoming / "journal-a-000001.jsonl", incoming / "journal-copy-000001.jsonl")
        (incoming / "journal-a-000099.jsonl.open").write_text("{}\n")  # still being written
        runs.append(run_report(str(incoming), str(base / "out"), spark=spark))
    full = run_report(str(incoming), str(base / "full"), spark=spark, full=True)
    return records, full, runs, base


def test_increments_equal_one_full_run(
    spark: SparkSession,
    fed: tuple[list[JournalRecord], ReportSummary, list[ReportSummary], Path],
) -> None:
    records, full, runs, _ = fed
    last = runs[-1]
    assert full.lines.valid == last.lines.valid == len(records)
    names = {p.name for p in (fed[3] / "journals").glob("*.jsonl")}
    distinct = names - {"journal-copy-000001.jsonl"}
    assert sum(r.files["new"] for r in runs) == len(distinct)
    assert runs[1].files["duplicates"] == 1
    assert all(r.files["still_open"] == 1 for r in runs)
    assert_same_summary(last, full)
    assert_same_tables(tables(spark, last), tables(spark, full))


def test_each_summary_is_read_back_with_its_noted_schema_and_an_older_state_still_reads(
    spark: SparkSession, tmp_path: Path
) -> None:
    records = random_journal(seed=5, messages=200)
    increments = arrivals(records, seed=5)
    incoming, out = tmp_path / "journals", tmp_path / "out"
    for name, chunk in increments[0]:
        journals.write(incoming / name, chunk)
    run_report(str(incoming), str(out), spark=spark)
    newest = sorted((out / ".state" / "manifest").glob("*.json"))[-1]
    manifest = Manifest.from_json(newest.read_text())
    assert set(manifest.schemas) == set(SUMMARIES)  # no job to infer them on the next read
    manifest.schemas = {}  # as a state written before the schemas were noted
    newest.write_text(manifest.to_json())
    for increment in increments[1:]:
        for name, chunk in increment:
            journals.write(incoming / name, chunk)
    last = run_report(str(incoming), str(out), spark=spark)
    full = run_report(str(incoming), str(tmp_path / "full"), spark=spark, full=True)
    assert_same_summary(last, full)
    assert_same_tables(tables(spark, last), tables(spark, full))


def _newest_manifest(state: Path) -> Manifest:
    return Manifest.from_json(sorted((state / "manifest").glob("*.json"))[-1].read_text())


def _per_hour_rows(spark: SparkSession, state: Path, name: str) -> list[tuple[Any, ...]]:
    """Every hour's rows of per-hour summary ``name``, each from the run the manifest names."""
    column = HOURLY[name]
    rows = []
    for hour, run in _newest_manifest(state).summary_hours[name].items():
        frame = spark.read.parquet(str(state / "data" / run / "hours" / name))
        of_hour = frame.where(f"{column} = {hour}").collect()
        rows += [tuple(sorted(r.asDict().items())) for r in of_hour]
    return sorted(rows)


def _totals(spark: SparkSession, state: Path, name: str) -> list[tuple[Any, ...]]:
    run = _newest_manifest(state).summaries
    frame = spark.read.parquet(str(state / "data" / str(run) / "summaries" / f"{name}_totals"))
    return sorted(tuple(sorted(r.asDict().items())) for r in frame.collect())


def test_histograms_are_kept_by_hour_and_their_totals_equal_a_full_runs(
    spark: SparkSession,
    fed: tuple[list[JournalRecord], ReportSummary, list[ReportSummary], Path],
) -> None:
    """Late files recompute hours an earlier run wrote: the replaced rows leave the totals
    (exactly: the same sums as one full run), and the files no hour is read from are gone."""
    _, _, runs, base = fed
    state, full_state = base / "out" / ".state", base / "full" / ".state"
    assert "2024-05-01T00:00Z" in runs[0].hours_recomputed + runs[1].hours_recomputed
    assert "2024-05-01T00:00Z" in runs[2].hours_recomputed  # recomputed: rows replaced
    for name in HOURLY:
        assert _per_hour_rows(spark, state, name) == _per_hour_rows(spark, full_state, name)
        assert _totals(spark, state, name) == _totals(spark, full_state, name)
        holding = set(_newest_manifest(state).summary_hours[name].values())
        assert {p.parent.parent.name for p in state.glob(f"data/*/hours/{name}")} == holding


def test_late_records_land_in_their_hour_and_counts_are_exact(
    spark: SparkSession,
    fed: tuple[list[JournalRecord], ReportSummary, list[ReportSummary], Path],
) -> None:
    records, _, runs, _ = fed
    assert "2024-05-01T00:00Z" in runs[2].hours_recomputed  # replica b's first hour came late
    want = expect.outcome_counts(records)
    rows = spark.read.parquet(runs[-1].tables["hourly"]).collect()
    assert len(rows) == len(want)
    for r in rows:
        counts = want[(r["queue"], r["priority"], int(r["hour"].timestamp() * 1000))]
        assert {o: r[o] for o in ("ack", "retry", "dead", "drop")} == {
            o: counts[o] for o in ("ack", "retry", "dead", "drop")
        }
    waits = expect.waits_s(records)
    for r in rows:
        values = waits[(r["queue"], r["priority"], int(r["hour"].timestamp() * 1000))]
        assert expect.within_rank(values, 0.95, r["wait_p95_s"])


def test_percentiles_across_hours_are_within_the_histogram_accuracy(
    fed: tuple[list[JournalRecord], ReportSummary, list[ReportSummary], Path],
) -> None:
    records, _, runs, _ = fed
    for row in runs[-1].priorities:
        waits = sorted((r.received_ms - r.enqueued_ms) / 1000 for r in records
                       if r.priority == row["priority"] and r.attempt == 1)  # fmt: skip
        for q, column in ((0.5, "wait_p50_s"), (0.95, "wait_p95_s"), (1.0, "wait_max_s")):
            exact = waits[max(1, math.ceil(len(waits) * q)) - 1]  # nearest rank
            assert row[column] == pytest.approx(exact, rel=0.005, abs=0.001)


def test_a_rerun_without_new_files_reads_nothing_and_changes_nothing(
    spark: SparkSession,
    fed: tuple[list[JournalRecord], ReportSummary, list[ReportSummary], Path],
) -> None:
    _, _, runs, base = fed
    again = run_report(str(base / "journals"), str(base / "out"), spark=spark)
    assert (again.files["new"], again.records_read, again.hours_recomputed) == (0, 0, [])
    assert_same_tables(tables(spark, again), tables(spark, runs[-1]))


def test_a_state_of_an_unknown_journal_schema_is_a_clear_error_and_full_rebuilds(
    spark: SparkSession, tmp_path: Path
) -> None:
    journals.write(tmp_path / "in" / "journal-a-000001.jsonl", random_journal(seed=1, messages=30))
    out = tmp_path / "out"
    run_report(str(tmp_path / "in"), str(out), spark=spark)
    manifest_dir = out / ".state" / "manifest"
    [name] = [p.name for p in manifest_dir.glob("*.json")]
    manifest = Manifest.from_json((manifest_dir / name).read_text())
    manifest.journal_schema = 99
    (manifest_dir / name).write_text(manifest.to_json())
    with pytest.raises(StateError, match=r"journal schema v99.*--full"):
        run_report(str(tmp_path / "in"), str(out), spark=spark)
    rebuilt = run_report(str(tmp_path / "in"), str(out), spark=spark, full=True)
    assert rebuilt.lines.valid > 0


def test_a_second_run_while_one_holds_the_state_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journals.write(tmp_path / "in" / "journal-a-000001.jsonl", [])
    with local_lock(str(tmp_path / "out" / ".state")):
        started = time.monotonic()
        code = report_command_line([str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--json"])
    assert code == 1
    assert time.monotonic() - started < 2  # before Spark starts
    assert "another report run is using the state directory" in capsys.readouterr().err


def _report_process(journal: Path, out: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "priority_pubsub", "report", str(journal),
               "--out", str(out), "--master", "local[2]", "--json"]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip


def _wait_for(condition: Any, process: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the run never reached the point to kill it"
        time.sleep(0.05)


@pytest.mark.parametrize("kill_when", ["lifecycle written", "committed, not published"])
def test_a_run_killed_mid_way_and_rerun_equals_a_clean_run(
    spark: SparkSession, tmp_path: Path, kill_when: str
) -> None:
    records = random_journal(seed=7, messages=300)
    for n, increment in enumerate(arrivals(records, seed=7)):
        for name, chunk in increment:
            journals.write(tmp_path / f"in{n}" / name, chunk)
    incoming = tmp_path / "journals"
    shutil.copytree(tmp_path / "in0", incoming)
    out = tmp_path / "out"
    run_report(str(incoming), str(out), spark=spark)  # the state already holds a run
    for n in (1, 2):
        shutil.copytree(tmp_path / f"in{n}", incoming, dirs_exist_ok=True)
    state = out / ".state"
    if kill_when == "lifecycle written":
        def reached() -> bool:  # the first run's and the killed one's
            return len(list(state.glob("data/*/lifecycle/_SUCCESS"))) > 1
    else:
        def reached() -> bool:
            return len(list(state.glob("manifest/*.json"))) > 1

    process = _report_process(incoming, out)
    try:
        holder = f"pid {process.pid} "
        _wait_for(lambda: (state / "lock").exists() and holder in (state / "lock").read_text(),
                  process)  # fmt: skip
        # meanwhile a second run is refused at once
        assert report_command_line([str(incoming), "--out", str(out), "--json"]) == 1
        _wait_for(reached, process)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver: python and its JVM
        process.wait()
    rerun = run_report(str(incoming), str(out), spark=spark)
    clean = run_report(str(incoming), str(tmp_path / "clean"), spark=spark)
    assert rerun.lines == clean.lines
    assert rerun.lines.valid == len(records)
    assert_same_tables(tables(spark, rerun), tables(spark, clean))
    live = {p.name for p in (state / "data").iterdir()}
    manifest = Manifest.from_json(sorted((state / "manifest").glob("*.json"))[-1].read_text())
    assert manifest.summaries in live
    assert len(live) <= 3  # what the killed run left was cleaned up
