"""Expected figures computed in plain Python from the records a test wrote."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable

from priority_pubsub.telemetry.journal import JournalRecord
from tests.spark.journals import HOUR_MS

Key = tuple[str, int, int]  # queue, priority, hour start (epoch ms)


def key(r: JournalRecord) -> Key:
    return (r.queue, r.priority, r.settled_ms - r.settled_ms % HOUR_MS)


def outcome_counts(records: Iterable[JournalRecord]) -> dict[Key, Counter[str]]:
    out: dict[Key, Counter[str]] = defaultdict(Counter)
    for r in records:
        out[key(r)][r.outcome] += 1
    return out


def waits_s(records: Iterable[JournalRecord]) -> dict[Key, list[float]]:
    out: dict[Key, list[float]] = defaultdict(list)
    for r in records:
        if r.attempt == 1:
            out[key(r)].append((r.received_ms - r.enqueued_ms) / 1000)
    return out


def within_rank(values: list[float], q: float, got: float, accuracy: int = 10_000) -> bool:
    """``got`` is a sample whose rank is within percentile_approx's error of rank q·n."""
    ordered = sorted(values)
    n = len(ordered)
    below = sum(v < got for v in ordered)
    at_or_below = sum(v <= got for v in ordered)
    slack = 1 + math.ceil(n / accuracy)
    target = q * n
    return got in ordered and below - slack <= target <= at_or_below + slack


def exact_erlang_c(c: int, a: float) -> float:
    """Erlang C from its textbook closed form (independent of the code under test)."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
