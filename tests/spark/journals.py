"""Journals with known answers, written as real JSONL files through ``JournalRecord``.

Timestamps are epoch ms from ``T0`` (an hour boundary, UTC). Each builder returns the records
it wrote so tests compute the expected figures in plain Python, independently of Spark.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

from priority_pubsub.telemetry.journal import JournalRecord

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
HOUR_MS = 3_600_000
QUEUES = {0: "tasks-high", 1: "tasks-normal", 2: "tasks-low"}


def record(
    msg: str,
    priority: int,
    enqueued: int,
    received: int,
    settled: int,
    *,
    attempt: int = 1,
    outcome: str = "ack",
    forwarded: int | None = None,
    reason: str | None = None,
    status: int | None = 200,
) -> JournalRecord:
    return JournalRecord(
        message_id=msg,
        queue=QUEUES[priority],
        priority=priority,
        driver="local",
        attempt=attempt,
        enqueued_ms=enqueued,
        received_ms=received,
        forwarded_ms=received if forwarded is None else forwarded,
        settled_ms=settled,
        outcome=outcome,
        http_status=status,
        reason=reason,
        bytes=100,
    )


def write(path: Path, records: Iterable[JournalRecord], extra_lines: Iterable[str] = ()) -> Path:
    """One JSONL file (gzip when the name ends in .gz)."""
    text = "".join(r.to_json() + "\n" for r in records) + "".join(x + "\n" for x in extra_lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def stats_journal(per_hour: int = 200, hours: int = 4) -> list[JournalRecord]:
    """Three priorities over ``hours`` hours with varied waits, retries, dead and drops.

    Message i of priority p in hour h: enqueued at h:00 + 10 s·i, waits
    (i·37 % 101 + 1)·10·(p+1)² ms, is processed for (i·53 % 97 + 1)·20 ms. Every 10th is
    retried once (503) then acked; i % 50 == 1 is dead (422), i % 50 == 2 dropped (404).
    """
    out: list[JournalRecord] = []
    for h in range(hours):
        for p in QUEUES:
            for i in range(per_hour):
                out.extend(_message(f"m-{h}-{p}-{i}", p, T0 + h * HOUR_MS + 10_000 * i, i))
    return out


def _message(msg: str, p: int, enqueued: int, i: int) -> list[JournalRecord]:
    wait = (i * 37 % 101 + 1) * 10 * (p + 1) ** 2
    proc = (i * 53 % 97 + 1) * 20
    received = enqueued + wait
    forwarded = received + 2
    settled = forwarded + proc
    if i % 10 == 0:
        first = record(msg, p, enqueued, received, settled, forwarded=forwarded,
                       outcome="retry", reason="status 503", status=503)  # fmt: skip
        again = settled + 1_000
        second = record(msg, p, enqueued, again, again + 2 + proc, attempt=2,
                        forwarded=again + 2)  # fmt: skip
        return [first, second]
    outcome, reason, status = "ack", None, 200
    if i % 50 == 1:
        outcome, reason, status = "dead", "fatal status 422", 422
    elif i % 50 == 2:
        outcome, reason, status = "drop", "app returned 404", 404
    return [record(msg, p, enqueued, received, settled, forwarded=forwarded,
                   outcome=outcome, reason=reason, status=status)]  # fmt: skip


BAD_LINES = {
    "malformed": ['{"v":1,"message_id":"torn', "not json at all", "[1, 2, 3]"],
    "unknown_version": [
        '{"v":99,"message_id":"n1","queue":"q","priority":0,"new_field":true}',
        '{"v":7,"message_id":"n2"}',
    ],
    "invalid": [
        '{"v":1,"message_id":"i1","priority":0}',
        '{"v":1,"message_id":"i2","queue":"tasks-high","priority":0,"driver":"local",'
        '"attempt":1,"enqueued_ms":1,"received_ms":2,"forwarded_ms":2,"settled_ms":3,'
        '"outcome":"maybe","http_status":null,"reason":null,"bytes":1}',
    ],
}


def starvation_journal() -> list[JournalRecord]:
    """A constructed starvation case (seconds after T0; p0 waits 0, takes 0.5 s).

    p1: A enq 0 recv 20, ten p0 deliveries at 1..10 s      -> window [0, 20], 10 higher
        B enq 30 recv 35, p0 at 32                         -> window [30, 35], 1 higher
        C enq 40 recv 50, no p0 meanwhile                  -> not starvation
        D enq 60, E enq 61, D recv 70, p0 at 72, E recv 75 -> [60,70] not; [70, 75] 1 higher
    p2: F enq 0 recv 100: every p0 and p1 delivery is inside -> window [0, 100], 17 higher
    """
    s = 1_000
    out = [record(f"h{t}", 0, T0 + t * s, T0 + t * s, T0 + t * s + 500) for t in
           (*range(1, 11), 32, 72)]  # fmt: skip
    for msg, enq, recv in (("A", 0, 20), ("B", 30, 35), ("C", 40, 50), ("D", 60, 70),
                           ("E", 61, 75)):  # fmt: skip
        out.append(record(msg, 1, T0 + enq * s, T0 + recv * s, T0 + recv * s + 500))
    out.append(record("F", 2, T0, T0 + 100 * s, T0 + 100 * s + 500))
    return out


def capacity_journal() -> list[JournalRecord]:
    """Poisson-free, exactly periodic load with known rates, service times and overlaps.

    p0: 360 messages, one every 10 s, each served 20 s  -> 2 in flight at any time
    p1: 36 messages, one every 100 s, each served 100 s -> 1 in flight at any time
    """
    out = []
    for i in range(360):
        t = T0 + i * 10_000
        out.append(record(f"c0-{i}", 0, t, t, t + 20_000))
    for i in range(36):
        t = T0 + i * 100_000 + 5_000
        out.append(record(f"c1-{i}", 1, t, t, t + 100_000))
    return out
