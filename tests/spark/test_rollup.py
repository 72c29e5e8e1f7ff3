"""The rollup's three levels against plain Python, with queues sharing a priority or not.

A (priority, hour) served by one queue takes its percentiles from that queue's group; one
served by several is sketched on its own. Both paths, and the per-priority level, must give
values within percentile_approx's error of the exact ones."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from priority_pubsub.analytics.journal.load import load
from priority_pubsub.analytics.model import tables as T
from priority_pubsub.telemetry.journal import JournalRecord
from tests.spark import expect, journals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def shared_journal() -> list[JournalRecord]:
    """The stats journal, with every third priority-1 message of hour 0 on a second queue."""
    records = journals.stats_journal(per_hour=120, hours=2)
    return [
        dataclasses.replace(r, queue="tasks-normal-b")
        if r.priority == 1 and r.settled_ms < journals.T0 + journals.HOUR_MS
        and int(r.message_id.rsplit("-", 1)[1]) % 3 == 0
        else r
        for r in records
    ]  # fmt: skip


def test_every_level_matches_the_records(spark: SparkSession, tmp_path: Path) -> None:
    records = shared_journal()
    path = journals.write(tmp_path / "journal-1.jsonl", records)
    loaded = load(spark, str(path), None, None, derive=T.with_derived)
    try:
        rows = [r.asDict() for r in T.rollup(loaded.valid).collect()]
    finally:
        loaded.release()

    def hour_ms(r: JournalRecord) -> int:
        return r.settled_ms - r.settled_ms % journals.HOUR_MS

    keyed: dict[tuple[int, object, object], list[JournalRecord]] = defaultdict(list)
    for r in records:
        keyed[(T.LEVEL_HOURLY, (r.priority, hour_ms(r)), r.queue)].append(r)
        keyed[(T.LEVEL_PRIORITY_HOUR, (r.priority, hour_ms(r)), None)].append(r)
        keyed[(T.LEVEL_PRIORITY, (r.priority, None), None)].append(r)
    assert len(rows) == len(keyed)
    shared_seen = False
    for row in rows:
        hour = None if row["hour"] is None else int(row["hour"].timestamp() * 1000)
        group = keyed[(row["level"], (row["priority"], hour), row["queue"])]
        assert row["attempts"] == len(group)
        assert row["queues"] == ", ".join(sorted({r.queue for r in group}))
        shared_seen |= row["level"] == T.LEVEL_PRIORITY_HOUR and "," in row["queues"]
        waits = [(r.received_ms - r.enqueued_ms) / 1000 for r in group if r.attempt == 1]
        procs = [(r.settled_ms - (r.forwarded_ms or 0)) / 1000 for r in group]
        for q, name in zip(T.PERCENTILES, ("p50", "p95", "p99"), strict=True):
            assert expect.within_rank(waits, q, row[f"wait_{name}_s"]), (row, q)
            assert expect.within_rank(procs, q, row[f"proc_{name}_s"]), (row, q)
    assert shared_seen


def test_attempts_and_dead_letters_summed_from_fine_groups(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Both tables are sums of ``fine_groups``; they count what the records say, a dead
    letter without a reason included, and retry reasons (free text) add no groups."""
    records = journals.stats_journal(per_hour=60, hours=2)
    t = journals.T0 + 10
    records += [
        journals.record("nr", 0, t, t + 1, t + 2, outcome="dead", reason=None, status=None),
        *(journals.record(f"r{i}", 1, t, t + 1, t + 2, outcome="retry", reason=f"took {i} ms")
          for i in range(20)),
    ]  # fmt: skip
    path = journals.write(tmp_path / "journal-1.jsonl", records)
    loaded = load(spark, str(path), None, None, derive=T.with_derived)
    try:
        fine = T.fine_groups(loaded.valid).persist()
        reasons = {r["reason"] for r in fine.select("reason").distinct().collect()}
        attempts = T.attempts_distribution(loaded.valid, fine)
        dead = T.dead_letters(loaded.valid, fine)
        got_attempts = {(r["priority"], r["attempt"]): r["deliveries"] for r in
                        attempts.groupBy("priority", "attempt").sum("deliveries")
                        .withColumnRenamed("sum(deliveries)", "deliveries").collect()}  # fmt: skip
        got_dead = {(r["priority"], r["outcome"], r["reason"]): r["messages"] for r in
                    dead.groupBy("priority", "outcome", "reason").sum("messages")
                    .withColumnRenamed("sum(messages)", "messages").collect()}  # fmt: skip
        nullable = {f.name: f.nullable for f in [*attempts.schema, *dead.schema]}
        fine.unpersist()
    finally:
        loaded.release()
    want_attempts: dict[tuple[int, int], int] = defaultdict(int)
    want_dead: dict[tuple[int, str, str], int] = defaultdict(int)
    for r in records:
        want_attempts[(r.priority, r.attempt)] += 1
        if r.outcome in ("dead", "drop"):
            want_dead[(r.priority, r.outcome, r.reason or "(no reason given)")] += 1
    assert got_attempts == want_attempts
    assert got_dead == want_dead
    assert (0, "dead", "(no reason given)") in got_dead
    assert reasons == {None, "fatal status 422", "app returned 404", "(no reason given)"}
    assert [name for name in ("deliveries", "messages", "reason") if nullable[name]] == []
