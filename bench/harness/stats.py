"""The few statistics the benchmarks report: medians over rounds, ratios measured side by
side, percentiles. Absolute numbers on a shared 2-core machine are noisy, so each benchmark
measures what it compares in the same run, interleaved, and reports ratios.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

Run = TypeVar("Run")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def median_run(runs: Sequence[Run], key: Callable[[Run], float]) -> Run | None:
    """The run whose ``key`` is the median (the lower middle one of an even count), so its
    other figures are shown beside that median; None without runs."""
    ordered = sorted(runs, key=key)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def median_of(values: Sequence[float | None]) -> float | None:
    """Median of the rounds that produced a value (None: none did)."""
    return median([v for v in values if v is not None])


def median_ratio(tops: Sequence[float | None], bottoms: Sequence[float | None]) -> float | None:
    """Median over rounds of top/bottom, each pair measured side by side in one round: the
    ratio the machine's drift between rounds disturbs least. A mode that did not run (an
    empty list) gives None."""
    ratios = [t / b for t, b in zip(tops, bottoms, strict=False) if t is not None and b]
    return round(statistics.median(ratios), 3) if ratios else None


def ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or not bottom:
        return None
    return round(top / bottom, 3)


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
