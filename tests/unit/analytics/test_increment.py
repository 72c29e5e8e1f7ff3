"""The incremental report's pure parts: histograms, the manifest, the human summary."""

from __future__ import annotations

import math
import random

from priority_pubsub.analytics.model import histogram
from priority_pubsub.analytics.state.store import Manifest


def _bucket(value: float) -> int:
    """The bucket Spark computes (``histogram.bucket``), in plain Python."""
    size = abs(value)
    if size < histogram.BASE_S:
        return 0
    index = 1 + math.floor(math.log(size / histogram.BASE_S) / math.log(histogram.GROWTH))
    return -index if value < 0 else index


def test_quantiles_of_summed_counts_are_within_half_a_percent_of_the_exact_rank() -> None:
    rng = random.Random(5)
    values = [round(rng.lognormvariate(0, 2), 3) for _ in range(5000)] + [0.0] * 50
    hours: list[dict[int, int]] = [{}, {}, {}]
    for v in values:  # spread over three "hours", summed afterwards as the report does
        counts = hours[rng.randrange(3)]
        counts[_bucket(v)] = counts.get(_bucket(v), 0) + 1
    summed: dict[int, int] = {}
    for counts in hours:
        for b, n in counts.items():
            summed[b] = summed.get(b, 0) + n
    ordered = sorted(values)
    qs = (0.01, 0.5, 0.95, 0.99, 1.0)
    for q, got in zip(qs, histogram.quantiles(summed.items(), qs), strict=True):
        exact = ordered[max(1, math.ceil(q * len(ordered))) - 1]
        assert got is not None
        assert abs(got - exact) <= 0.005 * exact + 1e-12, (q, got, exact)


def test_negative_and_empty() -> None:
    assert histogram.quantiles([], (0.5,)) == [None]
    [low] = histogram.quantiles([(_bucket(-2.0), 3)], (0.5,))
    assert low is not None
    assert low < 0
    assert abs(low + 2.0) <= 0.01


def test_a_manifest_round_trips_and_ignores_unknown_keys() -> None:
    manifest = Manifest(seq=4, records={"10": ["r1"]}, priorities=[0, 2])
    text = manifest.to_json().replace('"seq": 4', '"seq": 4, "added_later": true')
    assert Manifest.from_json(text) == manifest


def test_the_human_summary_says_what_was_read_the_worst_waits_and_where_the_page_is() -> None:
    from priority_pubsub.analytics.render.progress import human_summary

    text = human_summary({
        "lines": {"valid": 1200, "bad": 3}, "messages": 1000, "records_read": 450,
        "files": {"new": 2, "already_read": 5, "duplicates": 1},
        "hours_recomputed": ["2024-05-01T00:00Z", "2024-05-01T01:00Z"],
        "priorities": [{"priority": 0, "wait_p95_s": 0.25, "wait_max_s": 1.5}],
        "starvation": [{"priority": 1, "windows": 2, "duration_s": 75.0}],
        "html_path": "/tmp/out/report.html", "elapsed_s": 12.34,
    })  # fmt: skip
    assert "Read 450 journal lines from 2 new file(s) (5 already read, 1 duplicate(s) " in text
    assert "Hours recomputed: 2 (2024-05-01T00:00Z .. 2024-05-01T01:00Z)" in text
    assert "priority 0: wait p95 250 ms, worst 1.5 s" in text
    assert "priority 1 starved 2 time(s), longest 75.0 s" in text
    assert text.endswith("Report: /tmp/out/report.html (took 12.3 s)")


def test_a_small_run_is_an_increment_of_one_journal_file_over_a_few_hours() -> None:
    """``small_run`` decides whether the summaries end in one task (a coalesce) or in a
    shuffle to one partition: only an increment of little new data and few hours read."""
    from priority_pubsub.analytics.increment import SMALL_RUN_BYTES, SMALL_RUN_HOURS, small_run

    assert small_run(SMALL_RUN_BYTES, SMALL_RUN_HOURS, rebuild=False)
    assert not small_run(SMALL_RUN_BYTES + 1, 1, rebuild=False)  # more than one rotated file
    assert not small_run(1, SMALL_RUN_HOURS + 1, rebuild=False)  # a late record far back
    assert not small_run(1, 1, rebuild=True)  # a rebuild reads every hour
