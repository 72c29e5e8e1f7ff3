"""Shuffle partitions of the report, from the journal's size (no Spark needed)."""

from __future__ import annotations

from priority_pubsub.analytics.tuning import (
    MAX_SHUFFLE_PARTITIONS,
    SHUFFLE_BYTES_PER_PARTITION,
    shuffle_partitions,
)


def test_partitions_follow_the_input_size_within_bounds() -> None:
    assert shuffle_partitions(0, cores=2) == 2  # never fewer than the cores
    assert shuffle_partitions(248_000_000, cores=2) == 2  # 1 M records: ~250 MB
    assert shuffle_partitions(2_480_000_000, cores=2) == 19  # 10 M records
    assert shuffle_partitions(100 * SHUFFLE_BYTES_PER_PARTITION + 1, cores=8) == 101
    assert shuffle_partitions(10**15, cores=2) == MAX_SHUFFLE_PARTITIONS
