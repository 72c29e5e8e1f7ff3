"""A journal written by a real sidecar run (local driver, real app over HTTP), reported end to
end through the report's command line."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from priority_pubsub.cli import report_command_line
from tests.e2e.helpers import journal_records, publish, wait_until
from tests.support.app import Received, RecordingApp, Reply
from tests.support.sidecar import SidecarProcess, local_config, write_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.local, pytest.mark.timeout(400)]

# queue -> [(kind, count)]; kinds decide the app's answer
PUBLISHED = {
    "high": [("ok", 6)],
    "normal": [("ok", 2), ("fatal", 1), ("gone", 1)],
    "low": [("flaky", 1), ("ok", 2)],
}
MESSAGES = sum(n for kinds in PUBLISHED.values() for _, n in kinds)
DELIVERIES = MESSAGES + 1  # the flaky one is delivered twice


class Scripted:
    """ok -> 200, fatal -> 422 (dead), gone -> 404 (drop), flaky -> 503 once, then 200."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, request: Received) -> Reply:
        event = request.event
        kind = event["data"]["kind"]
        if kind == "fatal":
            return Reply(422)
        if kind == "gone":
            return Reply(404)
        if kind == "flaky":
            with self._lock:
                first = event["id"] not in self._seen
                self._seen.add(event["id"])
            if first:
                return Reply(503)
        return Reply(delay_s=0.05)


@pytest.fixture(scope="module")
def sidecar_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("sidecar")
    with RecordingApp(behaviour=Scripted()) as app:
        config = local_config(directory, app.url, concurrency=2, scheduling="strict",
                              retry={"max_attempts": 3, "initial_delay_s": 0.2,
                                     "max_delay_s": 1})  # fmt: skip
        config_path = write_config(directory, config)
        for queue in ("low", "normal", "high"):  # a backlog before start: priorities matter
            for kind, count in PUBLISHED[queue]:
                publish(config_path, queue, json.dumps({"kind": kind}), count=count)
        sidecar = SidecarProcess(directory, config)
        try:
            sidecar.wait_ready()
            wait_until(lambda: len(journal_records(directory / "journal")) >= DELIVERIES, 30)
        finally:
            assert sidecar.stop() == 0, sidecar.logs()
    return directory / "journal"


def test_real_sidecar_journal_reported_end_to_end(
    spark: SparkSession, sidecar_journal: Path, tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "report"
    code = report_command_line([str(sidecar_journal / "journal-*.jsonl"), "--out", str(out)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["lines"]["valid"] == DELIVERIES
    assert summary["lines"]["bad"] == 0
    assert summary["messages"] == MESSAGES

    hourly = spark.read.parquet(summary["tables"]["hourly"])
    totals = {
        (r["queue"], r["priority"]): r
        for r in hourly.groupBy("queue", "priority")
        .sum("attempts", "ack", "retry", "dead", "drop")
        .collect()
    }
    assert set(totals) == {("high", 0), ("normal", 1), ("low", 2)}
    normal, low = totals[("normal", 1)], totals[("low", 2)]
    assert (normal["sum(ack)"], normal["sum(dead)"], normal["sum(drop)"]) == (2, 1, 1)
    assert (low["sum(ack)"], low["sum(retry)"], low["sum(attempts)"]) == (3, 1, 4)

    reasons = {
        r["outcome"]: r["reason"]
        for r in spark.read.parquet(summary["tables"]["dead_letters"]).collect()
    }
    assert set(reasons) == {"dead", "drop"}
    assert "422" in reasons["dead"]

    life = spark.read.parquet(summary["tables"]["lifecycle"]).where("queue = 'low'").collect()
    assert sorted(r["attempts"] for r in life) == [1, 1, 2]
    assert all(r["final_outcome"] == "ack" and r["time_in_system_s"] > 0 for r in life)

    # strict scheduling with a backlog: the lower queues waited while "high" was served
    starved = {s["priority"]: s for s in summary["starvation"]}
    assert starved[2]["higher_priority_deliveries"] >= 6
    assert starved[2]["duration_s"] > 0
    assert summary["observed_peak"] <= 2  # concurrency: 2
    assert Path(summary["html_path"]).read_text().count("<svg") >= 5
