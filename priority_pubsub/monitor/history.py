"""The last 15 minutes of each queue's counters, sampled from the metrics themselves.

The monitor's per-minute rates and sparklines are differences of the Prometheus counters
(``priority_pubsub_messages_received_total`` and ``_settled_total`` by outcome), so the page
and ``/metrics`` cannot disagree. A sample every ``interval_s`` (not one per message) keeps
the delivery path untouched.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

from priority_pubsub.telemetry.metrics import Metrics

WINDOW_S = 15 * 60
SERIES = ("delivered", "ack", "retry", "dead")
"""``delivered``: received from the broker (each attempt); the rest: settled outcomes."""
Counts = dict[str, dict[str, float]]
"""queue -> series -> counter value."""


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    counts: Counts


def read_counts(metrics: Metrics, queues: Collection[str]) -> Counts:
    """The counters now, per queue and series (one collect per metric, not per value)."""
    counts: Counts = {name: dict.fromkeys(SERIES, 0.0) for name in queues}
    for family in metrics.received.collect():
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["queue"] in counts:
                counts[sample.labels["queue"]]["delivered"] += sample.value
    for family in metrics.settled.collect():
        for sample in family.samples:
            outcome, queue = sample.labels["outcome"], sample.labels["queue"]
            if sample.name.endswith("_total") and outcome in SERIES and queue in counts:
                counts[queue][outcome] += sample.value
    return counts


class History:
    def __init__(self, metrics: Metrics, queues: Collection[str], interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``queues``: the queues in force (a live view: a reload may add or remove one; a
        queue new since a sample counts from zero there)."""
        self._metrics = metrics
        self._queues = queues
        self.interval_s = interval_s
        self._clock = clock
        self._samples: deque[Sample] = deque(maxlen=int(WINDOW_S / interval_s) + 1)

    def sample(self) -> None:
        self._samples.append(Sample(self._clock(), read_counts(self._metrics, self._queues)))

    def per_minute(self, now: Sample) -> dict[str, dict[str, float]]:
        """Per queue and series: events per minute over the last minute (or since the first
        sample, when younger), ending at ``now``."""
        base = next((s for s in self._samples if now.at_s - s.at_s <= 60), None)
        if base is None or now.at_s - base.at_s < 1:
            return {q: dict.fromkeys(SERIES, 0.0) for q in self._queues}
        scale = 60 / (now.at_s - base.at_s)
        zero = dict.fromkeys(SERIES, 0.0)
        return {q: {k: round((now.counts.get(q, zero)[k] - base.counts.get(q, zero)[k]) * scale,
                             1) for k in SERIES}
                for q in self._queues}

    def now(self) -> Sample:
        return Sample(self._clock(), read_counts(self._metrics, self._queues))

    def sparkline(self, queue: str, series: str = "delivered") -> list[float]:
        """Events per sample interval over the last 15 minutes, oldest first."""
        values = [s.counts[queue][series] for s in self._samples if queue in s.counts]
        return [b - a for a, b in itertools.pairwise(values)]
