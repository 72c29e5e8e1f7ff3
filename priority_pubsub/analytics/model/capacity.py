"""Capacity: workers needed for a target wait (M/M/c, Erlang C) beside observed concurrency.

Model. Deliveries of priority ``p`` arrive as a Poisson stream of rate ``λ_p`` (deliveries,
retries included, over the span between the first and the last first-delivery enqueue) and
hold a worker for an exponential time of mean ``S_p`` (``settled - forwarded``; ``received``
when the attempt was never forwarded). Under strict priorities a ``p`` message competes only
with priorities ``≤ p``, so priority ``p`` is sized as an M/M/c FCFS queue fed by all of
them: ``λ = Σ λ_q``, ``S`` their rate-weighted mean, offered load ``a = λ·S`` workers.
With Erlang's C(c, a), the probability of waiting at all, an M/M/c queue has
``P(wait > t) = C(c, a) · exp(-(c - a)·t / S)``; the answer is the smallest ``c`` with
``P(wait > target) ≤ 5 %`` (p95 wait ≤ target). Caveats, stated on the page: arrivals are
rarely Poisson and service rarely exponential; a worker busy with a lower-priority task is
not pre-empted; and the lowest priority waits longer under strict priorities than under
FCFS, so its figure is a lower bound. The pool needs the lowest priority's figure.

Slots. With ``queues[].slots`` a delivery occupies k slots of ``concurrency`` (journal v4's
``slots``; null, and every older record: 1), and the sizing is in slots: a k-slot delivery
counts as k one-slot deliveries of its service time at once (the parallel tasks it
displaces), so the arrival rate is in slots per second, ``S`` their slot-weighted mean and
``a`` busy slots; the workers needed are slots of ``concurrency``. The deliveries per hour
and the mean time per delivery stay per delivery. (A k-slot message waits for k free slots
at once, longer than k one-slot ones would: again, a lower bound.)

Observed concurrency is the maximum number of slots in flight at once (intervals
``[forwarded, settled)``, each of its delivery's slots, ends before starts at the same
millisecond), per priority and overall, and the mean in flight (total busy slot time / span,
Little's law). A worker takes its
next message once the app has answered, while the settle still runs, so where settles take
longer than a receive (SQS groups deletes for a few milliseconds) the peak can pass the
configured concurrency by the settles under way; the app itself never had more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from priority_pubsub.core.erlang import MAX_WORKERS, P95_TAIL, erlang_c, wait_tail, workers_needed

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["MAX_WORKERS", "P95_TAIL", "erlang_c", "wait_tail", "workers_needed"]

@dataclass(frozen=True)
class CapacityRow:
    """Sizing of one priority, beside what was observed."""

    priority: int
    deliveries: int
    arrival_rate_per_s: float
    """Deliveries per second."""
    mean_service_s: float
    """Mean time per delivery."""
    offered_load: float
    """Busy slots: slots per second x their mean time (deliveries x time without slots)."""
    cumulative_load: float
    workers_needed: int | None
    observed_max_in_flight: int
    observed_mean_in_flight: float


def _service_ms() -> Column:
    from pyspark.sql import functions as F

    start = F.coalesce(F.col("forwarded_ms"), F.col("received_ms"))
    return F.greatest(F.col("settled_ms") - start, F.lit(0))


def _slots() -> Column:
    """A delivery's slots of concurrency: journal v4's ``slots``, null (and older) 1."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col("slots"), F.lit(1))


SWEEP_BUCKET_MS = 60_000


def max_in_flight(
    derived: DataFrame, priorities: Sequence[int] | None = None
) -> dict[int | None, int]:
    """Max concurrent intervals per priority, and overall (key None), in one job.

    A sweep of +1/-1 events sorted by (time, delta), so at one millisecond the ends come
    before the starts (as the module docstring says) and the running level's maximum over
    the events is the maximum over the milliseconds; as a two-level prefix sum so no
    partition holds more than one minute: within each minute, the running levels and their
    peaks; across minutes (a small frame), the level each minute starts from. A single
    running sum over all events would put every event of a key in one task. (The events are
    not summed per millisecond first: at one event or two per millisecond that hash
    aggregation cost more than the sort it was meant to save.)

    Every scope is swept in the same sort: each event is sorted once, by minute, and each
    priority's level is a running sum of its own deltas beside the overall one. (Sorting a
    copy of each event per scope doubled the rows shuffled and sorted, the step's largest
    cost.) A priority's level read on another priority's event is its level after its own
    last event in the minute (or the minute's start level), a value its own events already
    reached or the level 0 every sweep ends at, so the peaks are those of separate sweeps.

    ``priorities`` present in ``derived`` may be passed when already known (saves a job)."""
    if priorities is None:
        priorities = [r[0] for r in derived.select("priority").distinct().collect()]
    return peaks_from_minutes(sweep_minutes(derived, priorities))


def sweep_minutes(
    derived: DataFrame, priorities: Sequence[int], from_ms: int | None = None
) -> DataFrame:
    """Per (scope, minute): the peak level inside the minute (from 0 at its start) and the
    net change over it; ``from_ms`` (a minute boundary): only the minutes from there on,
    whose events all come from records settled from there on."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    scopes: list[int | None] = [*sorted(priorities), None]
    start = F.coalesce(F.col("forwarded_ms"), F.col("received_ms"))
    events = _sweep_events(derived, start)
    if from_ms is not None:
        events = events.where(F.col("t") >= from_ms)
    events = events.withColumn("bucket", F.floor(F.col("t") / SWEEP_BUCKET_MS))
    inside = (
        Window.partitionBy("bucket")
        .orderBy("t", "d")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )

    def delta(scope: int | None) -> Column:
        if scope is None:
            return F.col("d")
        return F.when(F.col("priority") == scope, F.col("d")).otherwise(0)

    levels = events.select(
        "bucket",
        *(delta(s).alias(f"d{i}") for i, s in enumerate(scopes)),
        *(F.sum(delta(s)).over(inside).alias(f"level{i}") for i, s in enumerate(scopes)),
    )
    per_bucket = levels.groupBy("bucket").agg(
        *(F.max(f"level{i}").alias(f"peak{i}") for i in range(len(scopes))),
        *(F.sum(f"d{i}").alias(f"net{i}") for i in range(len(scopes))),
    )
    unpivoted = F.array(
        *(
            F.struct(
                F.lit(s).cast("int").alias("scope"),
                F.col(f"peak{i}").alias("peak_inside"),
                F.col(f"net{i}").alias("net"),
            )
            for i, s in enumerate(scopes)
        )
    )
    return per_bucket.select("bucket", F.inline(unpivoted))


def peaks_from_minutes(buckets: DataFrame) -> dict[int | None, int]:
    """Max in flight per scope from ``sweep_minutes`` rows (or their ``fold_sweeps`` by
    hour) of every minute."""
    peaks = fold_sweeps(buckets).collect()
    return {r["scope"]: int(r["peak_inside"]) for r in peaks if r["peak_inside"] is not None}


def fold_sweeps(buckets: DataFrame, *within: str) -> DataFrame:
    """``sweep_minutes`` rows folded into one per scope (and ``within`` columns), of the
    same shape: the peak level inside the group (each minute's peak plus the level it
    starts from, a running sum of the nets before it in the group) and the net change. A
    fold of folds is the fold of the minutes: the incremental state keeps one row per hour."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    before = (
        Window.partitionBy("scope", *within)
        .orderBy("bucket")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    offset = F.coalesce(F.sum("net").over(before), F.lit(0))
    return (
        buckets.withColumn("peak", offset + F.col("peak_inside"))
        .groupBy("scope", *within)
        .agg(F.max("peak").alias("peak_inside"), F.sum("net").alias("net"))
    )


def _sweep_events(derived: DataFrame, start: Column) -> DataFrame:
    """(priority, t, d): +slots at each attempt's start and -slots at its end."""
    from pyspark.sql import functions as F

    edges = F.array(
        F.struct(start.alias("t"), _slots().alias("d")),
        F.struct(F.col("settled_ms").alias("t"), (-_slots()).alias("d")),
    )
    return derived.select("priority", F.inline(edges))


def observed_peak(peaks: dict[int | None, int]) -> int:
    """Max slots in flight at once over all priorities and queues (attempts, without
    ``slots``)."""
    return peaks.get(None, 0)


def fine_columns() -> list[Column]:
    """What ``capacity`` needs from the records as aggregates that add up across groups:
    the attempts' busy time, their slots and busy slot time, and the first deliveries'
    enqueue bounds, for ``tables.fine_groups`` to carry (so capacity reads no record
    again)."""
    from pyspark.sql import functions as F

    first_enq = F.when(F.col("attempt") == 1, F.col("enqueued_ms"))
    return [
        F.sum(_service_ms()).alias("busy_ms"),
        F.sum(_slots()).alias("slot_n"),
        F.sum(_service_ms() * _slots()).alias("slot_busy_ms"),
        F.min(first_enq).alias("first_enqueued_lo"),
        F.max(first_enq).alias("first_enqueued_hi"),
    ]


def capacity(
    derived: DataFrame,
    target_wait_s: float,
    peaks: dict[int | None, int],
    fine: DataFrame | None = None,
) -> list[CapacityRow]:
    """Per priority: arrival rate, service time, M/M/c workers needed, and the observed
    concurrency (``peaks``, from ``max_in_flight``). The per-priority figures are summed
    from ``fine`` (``tables.fine_groups`` of ``derived``) when given: the same numbers, as
    the busy time is a sum of whole milliseconds (exact in a double, as ``avg`` sums)."""
    from pyspark.sql import functions as F

    if fine is not None:
        return capacity_from_fine(fine, target_wait_s, peaks)
    first_enq = F.when(F.col("attempt") == 1, F.col("enqueued_ms"))
    service = _service_ms()
    stats = derived.groupBy("priority").agg(
        F.count("*").alias("n"),
        F.avg(service).alias("mean_ms"),
        F.sum(service).alias("busy_ms"),
        F.sum(_slots()).alias("slot_n"),
        F.sum(service * _slots()).alias("slot_busy_ms"),
        F.min(first_enq).alias("lo"),
        F.max(first_enq).alias("hi"),
    )
    return _sized(stats, target_wait_s, peaks)


def capacity_from_fine(
    fine: DataFrame, target_wait_s: float, peaks: dict[int | None, int]
) -> list[CapacityRow]:
    """``capacity`` from ``tables.fine_groups`` rows (of any hours: their sums add up)."""
    from pyspark.sql import functions as F

    stats = fine.groupBy("priority").agg(
        F.sum("n").alias("n"),
        (F.sum("busy_ms").cast("double") / F.sum("n").cast("double")).alias("mean_ms"),
        F.sum("busy_ms").alias("busy_ms"),
        F.sum("slot_n").alias("slot_n"),
        F.sum("slot_busy_ms").alias("slot_busy_ms"),
        F.min("first_enqueued_lo").alias("lo"),
        F.max("first_enqueued_hi").alias("hi"),
    )
    return _sized(stats, target_wait_s, peaks)


def _sized(
    stats: DataFrame, target_wait_s: float, peaks: dict[int | None, int]
) -> list[CapacityRow]:
    collected = sorted(stats.collect(), key=lambda r: r["priority"])
    los = [r["lo"] for r in collected if r["lo"] is not None]
    if not los:
        return []
    span_s = (max(r["hi"] for r in collected if r["hi"] is not None) - min(los)) / 1000.0
    rows: list[CapacityRow] = []
    cum_rate = cum_busy = 0.0
    for r in collected:
        # in slots; without ``slots`` one per delivery: the per-delivery mean, to the float
        slot_rate = r["slot_n"] / span_s if span_s > 0 else 0.0
        slot_mean_s = (float(r["mean_ms"]) if r["slot_n"] == r["n"]
                       else float(r["slot_busy_ms"]) / float(r["slot_n"])) / 1000.0
        cum_rate += slot_rate
        cum_busy += slot_rate * slot_mean_s
        mix_s = cum_busy / cum_rate if cum_rate > 0 else 0.0
        needed = workers_needed(cum_rate, mix_s, target_wait_s) if span_s > 0 else None
        rows.append(
            CapacityRow(
                priority=int(r["priority"]),
                deliveries=int(r["n"]),
                arrival_rate_per_s=r["n"] / span_s if span_s > 0 else 0.0,
                mean_service_s=float(r["mean_ms"]) / 1000.0,
                offered_load=slot_rate * slot_mean_s,
                cumulative_load=cum_busy,
                workers_needed=needed,
                observed_max_in_flight=peaks.get(int(r["priority"]), 0),
                observed_mean_in_flight=((r["slot_busy_ms"] / 1000.0 / span_s) if span_s > 0
                                         else 0.0),
            )
        )
    return rows
