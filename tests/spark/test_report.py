"""The whole report on a generated journal with known answers, plus bad lines (gzip)."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from priority_pubsub.analytics.journal.load import load
from priority_pubsub.analytics.journal.window import to_epoch_ms
from priority_pubsub.analytics.report import ReportSummary, run_report
from priority_pubsub.cli import report_command_line
from priority_pubsub.telemetry.journal import JournalRecord
from tests.spark import expect, journals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stats_records() -> list[JournalRecord]:
    return journals.stats_journal()


@pytest.fixture(scope="module")
def report(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, stats_records: list[Any]
) -> ReportSummary:
    base = tmp_path_factory.mktemp("stats")
    half = len(stats_records) // 2  # two files, one gzipped with the bad lines at its end
    journals.write(base / "in" / "journal-a.jsonl", stats_records[:half])
    bad = [line for lines in journals.BAD_LINES.values() for line in lines]
    journals.write(base / "in" / "journal-b.jsonl.gz", stats_records[half:], ["", *bad])
    return run_report(
        str(base / "in" / "journal-*"), str(base / "out"), target_wait_s=5.0, spark=spark
    )


def test_every_line_is_classified_and_bad_ones_are_shown(
    report: ReportSummary, stats_records: list[JournalRecord]
) -> None:
    lines = report.lines
    assert lines.valid == len(stats_records)
    assert (lines.malformed, lines.unknown_version, lines.invalid) == (3, 2, 2)
    assert lines.bad == 7
    assert sorted(lines.samples["malformed"]) == sorted(journals.BAD_LINES["malformed"])
    html = Path(report.html_path).read_text()
    assert "not json at all" in html
    assert "7 could not be used" in html


def test_hourly_counts_and_outcomes(
    spark: SparkSession, report: ReportSummary, stats_records: list[JournalRecord]
) -> None:
    expected = expect.outcome_counts(stats_records)
    rows = spark.read.parquet(report.tables["hourly"]).collect()
    assert len(rows) == len(expected)
    for r in rows:
        want = expected[(r["queue"], r["priority"], int(r["hour"].timestamp() * 1000))]
        got = {o: r[o] for o in ("ack", "retry", "dead", "drop")}
        assert got == {o: want[o] for o in got}
        assert r["attempts"] == sum(want.values())
        assert r["completed"] == r["attempts"] - r["retry"]
        assert r["dead_rate"] == pytest.approx(want["dead"] / r["attempts"])
        assert r["completed_per_s"] == pytest.approx(r["completed"] / 3600)


def test_wait_percentiles_within_approximation_error(
    spark: SparkSession, report: ReportSummary, stats_records: list[JournalRecord]
) -> None:
    waits = expect.waits_s(stats_records)
    for r in spark.read.parquet(report.tables["hourly"]).collect():
        values = waits[(r["queue"], r["priority"], int(r["hour"].timestamp() * 1000))]
        assert r["first_deliveries"] == len(values)
        for q, column in ((0.5, "wait_p50_s"), (0.95, "wait_p95_s"), (0.99, "wait_p99_s")):
            assert expect.within_rank(values, q, r[column]), (q, r[column], sorted(values))
    # priorities really differ: the generator scales waits by (priority + 1)^2
    hourly = spark.read.parquet(report.tables["hourly"]).collect()
    first_hour = min(r["hour"] for r in hourly)
    summary = {r["priority"]: r for r in hourly if r["hour"] == first_hour}
    assert summary[2]["wait_p95_s"] > summary[1]["wait_p95_s"] > summary[0]["wait_p95_s"]


def test_attempts_dead_letters_and_lifecycle(
    spark: SparkSession, report: ReportSummary, stats_records: list[JournalRecord]
) -> None:
    attempts = Counter(r.attempt for r in stats_records)
    rows = spark.read.parquet(report.tables["attempts"]).collect()
    got: Counter[int] = Counter()
    for r in rows:
        got[r["attempt"]] += r["deliveries"]
    assert got == attempts

    reasons = Counter((r.outcome, r.reason) for r in stats_records if r.outcome in ("dead", "drop"))
    dead: Counter[tuple[str, str | None]] = Counter()
    for r in spark.read.parquet(report.tables["dead_letters"]).collect():
        dead[(r["outcome"], r["reason"])] += r["messages"]
    assert dead == reasons

    life = spark.read.parquet(report.tables["lifecycle"])
    assert life.count() == report.messages == len({r.message_id for r in stats_records})
    retried = life.where("message_id = 'm-0-1-0'").first()
    assert retried is not None
    assert (retried["attempts"], retried["deliveries"], retried["final_outcome"]) == (2, 2, "ack")
    last = max(r.settled_ms for r in stats_records if r.message_id == "m-0-1-0")
    first = next(r for r in stats_records if r.message_id == "m-0-1-0")
    assert retried["time_in_system_s"] == pytest.approx((last - first.enqueued_ms) / 1000)


def test_page_is_self_contained_and_explains_itself(report: ReportSummary) -> None:
    html = Path(report.html_path).read_text()
    assert html.count("<svg") >= 5
    for needle in ("How long messages waited", "Throughput", "Outcomes", "Starvation",
                   "Capacity", "Glossary", "priority 2 (tasks-low)"):  # fmt: skip
        assert needle in html
    for remote in ("http://", "https://", "<script", "<link"):
        html_without_svg_ns = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert remote not in html_without_svg_ns


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_html", ROOT / "scripts/render_html.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_renders_in_headless_chromium(report: ReportSummary, tmp_path: Path) -> None:
    render = _render_module()
    if render.find_chromium() is None:
        reason = "chromium not installed (apt-get install -y chromium)"
        if __import__("os").environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    png = tmp_path / "report.png"
    render.render_png(Path(report.html_path), png, width=1300, height=2400, scale=0.5)
    stats = render.png_stats(png)
    assert (stats["width"], stats["height"]) == (650, 1200)
    assert stats["distinct_colours"] > 40  # text, grids, four outcome and three line colours
    assert 0.03 < stats["non_white_fraction"] < 0.9


def test_since_until_select_by_settle_time(spark: SparkSession, tmp_path: Path) -> None:
    hour = journals.HOUR_MS
    records = journals.stats_journal(per_hour=20, hours=3)
    journals.write(tmp_path / "journal-1.jsonl", records)
    since, until = "2024-05-01T01:00:00Z", "2024-05-01T02:00:00"  # no zone: UTC
    since_ms, until_ms = to_epoch_ms(since), to_epoch_ms(until)
    assert since_ms == journals.T0 + hour
    assert until_ms == journals.T0 + 2 * hour
    loaded = load(spark, str(tmp_path / "journal-1.jsonl"), since_ms, until_ms)
    try:
        in_hour = [r for r in records if since_ms <= r.settled_ms < until_ms]
        assert loaded.counts.valid == loaded.valid.count() == len(in_hour)
        assert loaded.counts.out_of_range == len(records) - len(in_hour)
    finally:
        loaded.release()


def test_cli_rejects_bad_time_before_starting_spark(tmp_path: Path) -> None:
    assert report_command_line(["journal-*", "--out", str(tmp_path), "--since", "yesterday"]) == 2
    assert report_command_line(["journal-*"]) == 2  # --out is required


def test_a_journal_of_only_bad_lines_still_gives_a_page(
    spark: SparkSession, tmp_path: Path
) -> None:
    bad = [line for lines in journals.BAD_LINES.values() for line in lines]
    journals.write(tmp_path / "journal-1.jsonl", [], bad)
    summary = run_report(str(tmp_path / "journal-1.jsonl"), str(tmp_path / "out"), spark=spark)
    assert (summary.lines.valid, summary.lines.bad, summary.messages) == (0, 7, 0)
    assert summary.capacity == []
    assert summary.starvation == []
    html = Path(summary.html_path).read_text()
    assert "no data in range" in html
    assert "7 could not be used" in html


def test_steps_side_by_side_each_run_with_its_own_job_description(spark: SparkSession) -> None:
    from priority_pubsub.analytics.spark.tuning import side_by_side

    seen: dict[str, str | None] = {}

    def step(name: str) -> None:
        context = spark.sparkContext
        context.setJobDescription(f"report: {name}")
        spark.range(100).count()
        seen[name] = context.getLocalProperty("spark.job.description")

    side_by_side(spark, lambda: step("a"), lambda: step("b"))
    assert seen == {"a": "report: a", "b": "report: b"}


def test_a_failed_step_side_by_side_fails_the_report_after_the_other_finished(
    spark: SparkSession,
) -> None:
    from priority_pubsub.analytics.spark.tuning import side_by_side

    counted: list[int] = []

    def fails() -> None:
        raise RuntimeError("starvation failed")

    with pytest.raises(RuntimeError, match="starvation failed"):
        side_by_side(spark, fails, lambda: counted.append(spark.range(10).count()))
    assert counted == [10]


def test_a_report_that_fails_leaves_nothing_cached_in_the_session_it_was_given(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a long-lived session (a notebook, a cluster job running several reports) must not
    # keep a failed report's cached frames
    from priority_pubsub.analytics import increment

    def fails(*_: object) -> None:
        raise RuntimeError("starvation failed")

    journals.write(tmp_path / "journal-1.jsonl", journals.stats_journal(per_hour=20, hours=2))
    persisted = spark.sparkContext._jsc.getPersistentRDDs().size()
    monkeypatch.setattr(increment, "starvation_minutes", fails)
    with pytest.raises(RuntimeError, match="starvation failed"):
        run_report(str(tmp_path / "journal-1.jsonl"), str(tmp_path / "out"), spark=spark)
    assert spark.sparkContext._jsc.getPersistentRDDs().size() == persisted
