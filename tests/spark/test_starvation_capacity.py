"""Starvation windows and capacity figures on constructed journals with known answers."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from priority_pubsub.analytics.model import capacity as cap
from priority_pubsub.analytics.model.starvation import StarvationRow, collect_rows, starvation
from priority_pubsub.analytics.model.tables import fine_groups, with_derived
from priority_pubsub.telemetry.journal import JournalRecord
from tests.spark import expect, journals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def frame(spark: SparkSession, tmp_path: Path, records: list[JournalRecord]) -> DataFrame:
    """The records as the report sees them: a real file read with the journal schema."""
    from priority_pubsub.analytics.journal.load import load

    path = journals.write(tmp_path / "journal-1.jsonl", records)
    loaded = load(spark, str(path), None, None)
    assert loaded.counts.bad == 0
    return with_derived(loaded.valid)


def test_longest_starvation_window_per_lower_priority(spark: SparkSession, tmp_path: Path) -> None:
    derived = frame(spark, tmp_path, journals.starvation_journal())
    rows = {r.priority: r for r in collect_rows(starvation(spark, derived))}
    assert set(rows) == {1, 2}  # the highest priority cannot be starved
    t0 = journals.T0
    p1 = rows[1]
    assert (p1.window_start_ms, p1.window_end_ms) == (t0, t0 + 20_000)
    assert p1.duration_s == 20.0
    assert p1.higher_priority_deliveries == 10
    assert p1.windows == 3  # A, B and E; C and D waited without anything more urgent served
    p2 = rows[2]
    assert (p2.window_start_ms, p2.window_end_ms, p2.duration_s) == (t0, t0 + 100_000, 100.0)
    assert p2.higher_priority_deliveries == 17  # 12 of priority 0 and 5 of priority 1
    assert p2.windows == 1


def test_starvation_with_a_partial_priority_list(spark: SparkSession, tmp_path: Path) -> None:
    """Records of a priority missing from the list passed still serve the targets above it
    (their events come from the per-target conditions, not from a branch of their own)."""
    derived = frame(spark, tmp_path, journals.starvation_journal())
    every = {r.priority: r for r in collect_rows(starvation(spark, derived, [0, 1, 2]))}
    partial = collect_rows(starvation(spark, derived, [1, 2]))
    assert partial == [every[2]]
    assert every[2].higher_priority_deliveries == 17  # priority 0's receives counted


def test_single_priority_has_no_starvation_rows(spark: SparkSession, tmp_path: Path) -> None:
    only_high = [r for r in journals.starvation_journal() if r.priority == 0]
    derived = frame(spark, tmp_path, only_high)
    assert collect_rows(starvation(spark, derived)) == []


@pytest.mark.parametrize(("c", "a"), [(3, 2.0), (1, 0.5), (12, 10.0), (40, 35.5)])
def test_erlang_c_matches_the_closed_form(c: int, a: float) -> None:
    assert cap.erlang_c(c, a) == pytest.approx(expect.exact_erlang_c(c, a), rel=1e-9)


def test_erlang_c_textbook_value_and_edges() -> None:
    assert cap.erlang_c(3, 2.0) == pytest.approx(4 / 9)  # A = 2 Erlang, 3 agents
    assert cap.erlang_c(2, 2.0) == 1.0  # unstable: everyone waits
    assert cap.erlang_c(5, 0.0) == 0.0
    assert cap.workers_needed(0.0, 10.0, 60.0) == 0
    assert cap.workers_needed(1.0, 0.0, 60.0) == 1


def test_workers_needed_is_the_smallest_meeting_the_target() -> None:
    rate, service, target = 0.5, 20.0, 5.0  # 10 busy workers on average
    needed = cap.workers_needed(rate, service, target)
    assert needed is not None
    assert cap.wait_tail(needed, rate, service, target) <= 0.05
    assert cap.wait_tail(needed - 1, rate, service, target) > 0.05
    assert needed > 10
    # a looser target never needs more workers
    loose = cap.workers_needed(rate, service, 600.0)
    assert loose is not None
    assert loose <= needed


def test_capacity_from_a_constructed_journal(spark: SparkSession, tmp_path: Path) -> None:
    derived = frame(spark, tmp_path, journals.capacity_journal())
    peaks = cap.max_in_flight(derived)
    rows = {r.priority: r for r in cap.capacity(derived, 5.0, peaks)}
    from_fine = cap.capacity(derived, 5.0, peaks, fine_groups(derived))
    assert from_fine == sorted(rows.values(), key=lambda r: r.priority)  # the same floats
    span_s = (359 * 10_000) / 1000  # first-delivery enqueues from T0 to T0 + 3590 s
    p0, p1 = rows[0], rows[1]
    assert p0.deliveries == 360
    assert p0.arrival_rate_per_s == pytest.approx(360 / span_s)
    assert p0.mean_service_s == pytest.approx(20.0)
    assert p0.offered_load == pytest.approx(360 / span_s * 20)
    assert p1.mean_service_s == pytest.approx(100.0)
    assert p1.cumulative_load == pytest.approx(p0.offered_load + 36 / span_s * 100)
    # M/M/c answers, checked with the closed form: P(wait > T) = C(c, a) exp(-(c - a) T / S)
    rate0, rate1 = 360 / span_s, 36 / span_s
    for row, rate, mean_s in ((p0, rate0, 20.0), (p1, rate0 + rate1, row_mix(rate0, rate1))):
        c, a = row.workers_needed, row.cumulative_load
        assert c is not None
        assert a == pytest.approx(rate * mean_s)
        assert exact_tail(c, a, mean_s, 5.0) <= 0.05 < exact_tail(c - 1, a, mean_s, 5.0)
    assert p0.workers_needed == 5
    assert p1.workers_needed is not None
    assert p1.workers_needed > p0.workers_needed
    # observed: two p0 tasks always overlap, p1 runs one at a time, three at once overall
    assert (p0.observed_max_in_flight, p1.observed_max_in_flight) == (2, 1)
    assert cap.observed_peak(peaks) == 3
    assert p0.observed_mean_in_flight == pytest.approx(360 * 20 / span_s)


def test_capacity_counts_slots(spark: SparkSession, tmp_path: Path) -> None:
    """The journal's ``slots`` (v4). p1's deliveries take 2 slots each: they
    count as 2 deliveries of their time at once in the load, the workers needed and the
    slots in flight; the deliveries per hour and the time per delivery stay per delivery."""
    records = journals.capacity_journal()
    for record in records:
        if record.priority == 1:
            record.slots = 2
    derived = frame(spark, tmp_path, records)
    peaks = cap.max_in_flight(derived)
    rows = {r.priority: r for r in cap.capacity(derived, 5.0, peaks)}
    assert cap.capacity(derived, 5.0, peaks, fine_groups(derived)) == [rows[0], rows[1]]
    span_s = (359 * 10_000) / 1000
    rate0, rate1 = 360 / span_s, 36 / span_s
    p0, p1 = rows[0], rows[1]
    assert (p1.deliveries, p1.mean_service_s) == (36, pytest.approx(100.0))
    assert p1.arrival_rate_per_s == pytest.approx(rate1)
    assert p1.offered_load == pytest.approx(2 * rate1 * 100)
    assert p1.cumulative_load == pytest.approx(p0.offered_load + 2 * rate1 * 100)
    assert p0.offered_load == pytest.approx(rate0 * 20)  # p0 as without slots
    slot_rate = rate0 + 2 * rate1
    mix_s = (rate0 * 20 + 2 * rate1 * 100) / slot_rate
    c = p1.workers_needed
    assert c is not None
    assert exact_tail(c, slot_rate * mix_s, mix_s, 5.0) <= 0.05 < exact_tail(
        c - 1, slot_rate * mix_s, mix_s, 5.0)
    # a p1 task holds 2 slots, one at a time; with p0's two, four at once overall
    assert (p0.observed_max_in_flight, p1.observed_max_in_flight) == (2, 2)
    assert cap.observed_peak(peaks) == 4
    assert p1.observed_mean_in_flight == pytest.approx(2 * 36 * 100 / span_s)


def test_max_in_flight_matches_a_plain_sweep(spark: SparkSession, tmp_path: Path) -> None:
    """The two-level (per-minute) sweep of every scope at once gives each scope the peak a
    single sweep over its own events gives, with intervals crossing minute boundaries, ends
    and starts sharing a millisecond, and minutes with no event at all."""
    rng = random.Random(20)
    records, intervals = [], []
    for i in range(400):
        start = journals.T0 + rng.choice((0, cap.SWEEP_BUCKET_MS)) * rng.randint(0, 9) + (
            rng.randint(0, 3) * 250 if rng.random() < 0.5 else rng.randint(0, 600_000)
        )
        end = start + rng.choice((0, 250, 500, cap.SWEEP_BUCKET_MS, rng.randint(1, 200_000)))
        priority = rng.randint(0, 2)
        records.append(journals.record(f"m{i}", priority, start - 5, start, end))
        intervals.append((priority, start, end))
    derived = frame(spark, tmp_path, records)
    peaks = cap.max_in_flight(derived)
    for scope in (0, 1, 2, None):
        chosen = [(s, e) for p, s, e in intervals if scope is None or p == scope]
        assert peaks[scope] == plain_sweep(chosen), scope
    assert cap.max_in_flight(derived, [2, 0, 1]) == peaks  # priorities given, in any order


def test_in_flight_folded_by_hour_carries_the_level_across_minutes_and_hours(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The incremental state keeps the sweep's minutes folded by hour, and a later run
    sweeps from an hour on beside the earlier hours' folds: the peaks of one plain sweep,
    where the peak needs the level carried in from earlier minutes and hours (attempts of
    up to 8 minutes, starting over 10; "hours" of two and three minutes here)."""
    from priority_pubsub.analytics.model import starvation as module

    rng = random.Random(3)
    records, intervals = [], []
    for i in range(300):
        start = journals.T0 + rng.randint(0, 10 * cap.SWEEP_BUCKET_MS)
        end = start + rng.randint(0, 8 * cap.SWEEP_BUCKET_MS)
        priority = rng.randint(0, 2)
        records.append(journals.record(f"f{i}", priority, start - 5, start, end))
        intervals.append((priority, start, end))
    derived = frame(spark, tmp_path, records)
    want = {s: plain_sweep([(a, b) for p, a, b in intervals if s is None or p == s])
            for s in (0, 1, 2, None)}  # fmt: skip
    minutes = cap.sweep_minutes(derived, [0, 1, 2])
    assert cap.peaks_from_minutes(minutes) == want
    inside = minutes.groupBy().max("peak_inside").collect()[0][0]
    assert inside < want[None]  # no minute alone reaches the peak: the carry matters
    for hour_minutes in (2, 3):
        monkeypatch.setattr(module, "HOUR_MINUTES", hour_minutes)
        hours = module.by_hour(minutes, cap.fold_sweeps)
        assert cap.peaks_from_minutes(hours) == want, hour_minutes
        assert cap.peaks_from_minutes(module.by_hour(hours, cap.fold_sweeps)) == want
        from_ms = journals.T0 + 2 * hour_minutes * cap.SWEEP_BUCKET_MS  # an hour boundary
        later = module.by_hour(cap.sweep_minutes(derived, [0, 1, 2], from_ms), cap.fold_sweeps)
        earlier = hours.where(hours["bucket"] < from_ms // cap.SWEEP_BUCKET_MS)
        assert cap.peaks_from_minutes(earlier.unionByName(later)) == want, hour_minutes


def plain_sweep(intervals: list[tuple[int, int]]) -> int:
    """Max of [start, end) intervals open at once; an end before a start at one instant."""
    events = sorted([(e, -1) for _, e in intervals] + [(s, 1) for s, _ in intervals])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def row_mix(rate0: float, rate1: float) -> float:
    """Rate-weighted mean service time of priorities 0 (20 s) and 1 (100 s)."""
    return (rate0 * 20.0 + rate1 * 100.0) / (rate0 + rate1)


def exact_tail(c: int, a: float, mean_s: float, wait_s: float) -> float:
    if c <= a:
        return 1.0
    return expect.exact_erlang_c(c, a) * math.exp(-(c - a) * wait_s / mean_s)


def test_starvation_per_minute_equals_one_sweep(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two-level computation (per minute, then within it) gives the windows a single
    sweep over each priority's events gives: the same journal, minutes of 1 s vs one bucket."""
    from priority_pubsub.analytics.model import starvation as module

    rng = random.Random(7)
    records = []
    for i in range(600):
        priority = rng.choice((0, 0, 1, 1, 2))
        enqueued = journals.T0 + rng.randint(0, 20_000)
        received = enqueued + rng.choice((0, 5, rng.randint(0, 4_000)))
        records.append(journals.record(f"s{i}", priority, enqueued, received, received + 50))
    derived = frame(spark, tmp_path, records)
    monkeypatch.setattr(module, "STARVATION_BUCKET_MS", 10**15)
    one_sweep = collect_rows(starvation(spark, derived))
    monkeypatch.setattr(module, "STARVATION_BUCKET_MS", 1_000)
    per_second = collect_rows(starvation(spark, derived))
    assert per_second == one_sweep
    assert any(r.windows > 0 for r in one_sweep)


def test_starvation_folded_by_hour_equals_the_minutes_it_folds(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The incremental state keeps the per-minute rows folded by hour, and a later run
    computes its minutes from an hour on beside the earlier hours' folds: the same windows
    as the minutes themselves and as one sweep, with windows crossing minute and hour
    boundaries (minutes of 1 s, hours of 5 s here)."""
    from priority_pubsub.analytics.model import starvation as module

    rng = random.Random(11)
    records = []
    for i in range(240):  # sparse enough that a backlog often empties inside an hour
        priority = rng.choice((0, 0, 1, 1, 2))
        enqueued = journals.T0 + rng.randint(0, 20_000)
        received = enqueued + rng.choice((0, 5, rng.randint(0, 6_000)))
        records.append(journals.record(f"h{i}", priority, enqueued, received, received + 50))
    derived = frame(spark, tmp_path, records)
    priorities = [0, 1, 2]

    def windows(minutes: DataFrame) -> list[StarvationRow]:
        return collect_rows(module.from_minutes(spark, priorities, minutes))

    monkeypatch.setattr(module, "STARVATION_BUCKET_MS", 10**15)
    one_sweep = collect_rows(starvation(spark, derived))
    monkeypatch.setattr(module, "STARVATION_BUCKET_MS", 1_000)
    monkeypatch.setattr(module, "HOUR_MINUTES", 5)
    counts, minutes = module.starvation_minutes(spark, derived, priorities)
    for computed, declared in ((counts, module.COUNTS_SCHEMA), (minutes, module.MINUTES_SCHEMA)):
        # the columns one priority's empty frames declare (a state keeps them alike)
        empty = spark.createDataFrame([], declared)
        assert computed.schema.simpleString() == empty.schema.simpleString()
    hours = module.by_hour(minutes, module.fold_minutes)
    assert windows(minutes) == windows(hours) == one_sweep
    assert any(r.windows > 1 for r in one_sweep)
    assert windows(module.by_hour(hours, module.fold_minutes)) == one_sweep  # a fold of folds
    hour_counts = module.by_hour(counts, module.fold_counts)
    for from_ms in (journals.T0 + 5_000, journals.T0 + 10_000):  # hour boundaries
        _, later = module.starvation_minutes(
            spark, derived, priorities, from_ms, hour_counts, hours
        )
        assert windows(module.by_hour(later, module.fold_minutes)) == one_sweep, from_ms
