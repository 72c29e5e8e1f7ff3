"""The live capacity signal: how many workers each queue needs now, for autoscaling.

Per queue with ``wait_slo_s``, ``priority_pubsub_workers_needed{queue}`` is the report's
Erlang-C sizing (``erlang``; model in ``analytics.model.capacity``) on what this replica saw over a
sliding window (``server.capacity_window_s``, 10 min by default): the arrival rate is its
deliveries (retries included, releases not: no worker held them) plus the change in the
queue's depth where the broker tells it, the service time is ``settled - forwarded``. Under
strict priorities a queue competes with the queues above it, so queue p is sized on the load
of queues 0..p together, as the report sizes priority p. The figure is in slots of
``concurrency``: a delivery of a ``slots: k`` queue counts as k deliveries of its service time
at once (the k parallel one-slot tasks it displaces), so the load is in slot-seconds. Across
replicas the figures add up (each saw its own deliveries); the depth term is the queue's own,
seen by every replica, so a backlog's growth is counted once per replica (docs/long-tasks.md).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from priority_pubsub.core.erlang import MAX_WORKERS, workers_needed

DEFAULT_WINDOW_S = 600.0


class LiveCapacity:
    def __init__(self, wait_slo_s: Sequence[float | None], window_s: float = DEFAULT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._slo = list(wait_slo_s)
        self._window_s = window_s
        self._clock = clock
        self._started = clock()
        self._served: list[deque[list[float]]] = [deque() for _ in self._slo]
        """Per queue, per second of the window: [second, deliveries, service seconds]. Per
        second, not per delivery: at 2,600 deliveries/s a 10-min window of tuples held 1.5 M
        of them (RSS grew 14 MB per 100 k messages: ``bench.soak`` caught it)."""
        self._depths: list[deque[tuple[float, int]]] = [deque() for _ in self._slo]

    def reshape(self, kept: Sequence[int | None], wait_slo_s: Sequence[float | None]) -> None:
        """The queues in force changed (a live reload, a queue added while running): queue
        ``i`` is now the former ``kept[i]`` (its window kept), or new (None)."""
        self._served = [self._served[k] if k is not None else deque() for k in kept]
        self._depths = [self._depths[k] if k is not None else deque() for k in kept]
        self._slo = list(wait_slo_s)

    def served(self, queue: int, service_s: float, slots: int = 1) -> None:
        """One delivery of ``queue`` held ``slots`` slots ``service_s``."""
        now = self._clock()
        buckets = self._served[queue]
        second = float(int(now))
        busy_s = max(0.0, service_s) * slots
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += slots
            buckets[-1][2] += busy_s
        else:
            buckets.append([second, float(slots), busy_s])
        self._forget(buckets, now)

    def depth_seen(self, queue: int, visible: int) -> None:
        now = self._clock()
        self._depths[queue].append((now, visible))
        self._forget(self._depths[queue], now)

    def arrival_rates(self) -> list[float]:
        """Messages per second arriving at each queue, as this replica can tell."""
        now = self._clock()
        span_s = min(self._window_s, now - self._started)
        if span_s <= 0:
            return [0.0] * len(self._slo)
        rates = []
        for served, depths in zip(self._served, self._depths, strict=True):
            self._forget(served, now)
            self._forget(depths, now)
            grown = depths[-1][1] - depths[0][1] if len(depths) > 1 else 0
            rates.append(max(0.0, sum(b[1] for b in served) + grown) / span_s)
        return rates

    def mean_service_s(self) -> list[float]:
        means = []
        for served in self._served:
            count = sum(b[1] for b in served)
            means.append(sum(b[2] for b in served) / count if count else 0.0)
        return means

    def workers_needed(self) -> list[int | None]:
        """Per queue: the workers for its ``wait_slo_s`` (p95), sized on its load and that of
        the queues above it; None for a queue without ``wait_slo_s``."""
        needed: list[int | None] = []
        cum_rate = cum_busy = 0.0
        for rate, mean_s, slo in zip(self.arrival_rates(), self.mean_service_s(), self._slo,
                                     strict=True):
            cum_rate += rate
            cum_busy += rate * mean_s
            if slo is None:
                needed.append(None)
                continue
            mix_s = cum_busy / cum_rate if cum_rate > 0 else 0.0
            workers = workers_needed(cum_rate, mix_s, slo)
            needed.append(MAX_WORKERS if workers is None else workers)
        return needed

    def _forget(self, samples: deque[list[float]] | deque[tuple[float, int]],
                now: float) -> None:
        while samples and samples[0][0] < now - self._window_s:
            samples.popleft()
