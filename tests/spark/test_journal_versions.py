"""The report reads journal schema v1 to v4 files alike, and counts a failed settle right:
not completed (the broker delivers the message again), a ``release`` not a delivery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from priority_pubsub.analytics.report import run_report
from tests.spark import journals
from tests.spark.journals import T0, record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


def as_v1(line: str) -> str:
    value = json.loads(line)
    value["v"] = 1
    return json.dumps(value)


def test_old_and_new_journals_in_one_report(spark: SparkSession, tmp_path: Path) -> None:
    old = [record("old-1", 0, T0, T0 + 10, T0 + 20), record("old-2", 0, T0, T0 + 10, T0 + 30)]
    new = [
        record("s-1", 0, T0, T0 + 5, T0 + 6, outcome="release", status=None, forwarded=None,
               reason="surplus: returned unseen"),
        record("s-1", 0, T0, T0 + 40, T0 + 50),
        # the app said 200, the delete failed: the broker will deliver it again
        record("f-1", 0, T0, T0 + 10, T0 + 60, outcome="settle_failed",
               reason="ack; settle failed: DriverUnavailable('broker down')"),
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "journal-old.jsonl").write_text(
        "".join(as_v1(r.to_json()) + "\n" for r in old)
    )
    journals.write(tmp_path / "in" / "journal-new.jsonl", new)
    summary = run_report(str(tmp_path / "in" / "journal-*"), str(tmp_path / "out"), spark=spark)

    assert summary.lines.bad == 0
    assert (summary.lines.valid, summary.lines.released) == (4, 1)
    [hour] = spark.read.parquet(summary.tables["hourly"]).collect()
    assert (hour["attempts"], hour["ack"], hour["settle_failed"]) == (4, 3, 1)
    assert hour["completed"] == 3  # a failed settle is not a completion
    assert hour["first_deliveries"] == 4  # the release is no delivery: s-1 waited 40 ms
    life = {r["message_id"]: r for r in spark.read.parquet(summary.tables["lifecycle"]).collect()}
    assert life["f-1"]["final_outcome"] == "in_progress"
    assert (life["s-1"]["final_outcome"], life["s-1"]["deliveries"]) == ("ack", 1)
    assert life["old-1"]["final_outcome"] == "ack"
    html = Path(summary.html_path).read_text()
    assert "released unseen" in html
    assert "settle_failed" in html


def as_version(line: str, version: int) -> str:
    """A line as a sidecar of ``version`` wrote it: v1 and v2 had no ``promoted_after_s``,
    v3 no ``slots``."""
    value = json.loads(line)
    value["v"] = version
    if version < 3:
        del value["promoted_after_s"]
    if version < 4:
        del value["slots"]
    return json.dumps(value)


def test_v1_to_v4_lines_are_read_alike(spark: SparkSession, tmp_path: Path) -> None:
    promoted = record("p-1", 2, T0, T0 + 600_000, T0 + 606_000)
    promoted.promoted_after_s = 600.0
    heavy = record("h-1", 1, T0, T0 + 10, T0 + 50)
    heavy.slots = 2
    lines = [
        as_version(record("a-1", 0, T0, T0 + 10, T0 + 20).to_json(), 1),
        as_version(record("b-1", 1, T0, T0 + 10, T0 + 30).to_json(), 2),
        as_version(promoted.to_json(), 3),
        as_version(heavy.to_json(), 4),
        as_version(record("c-1", 0, T0, T0 + 10, T0 + 40).to_json(), 5),  # a newer sidecar
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "journal-mixed.jsonl").write_text("".join(x + "\n" for x in lines))
    summary = run_report(str(tmp_path / "in" / "journal-*"), str(tmp_path / "out"), spark=spark)
    assert (summary.lines.valid, summary.lines.unknown_version) == (4, 1)
    life = {r["message_id"]: r for r in spark.read.parquet(summary.tables["lifecycle"]).collect()}
    assert {name: life[name]["final_outcome"] for name in ("a-1", "b-1", "p-1", "h-1")} == {
        "a-1": "ack", "b-1": "ack", "p-1": "ack", "h-1": "ack"}
