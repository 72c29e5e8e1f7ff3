"""Erlang C (M/M/c): the workers a queue needs for a target wait, in plain Python.

One implementation for both places that size workers: the report, offline from the journal
(``analytics.model.capacity``), and the sidecar's live ``priority_pubsub_workers_needed`` gauge
(``telemetry.live_capacity``), so the two figures differ only by the data they see. The
model and its caveats are in ``analytics.model.capacity``'s docstring.
"""

from __future__ import annotations

import math

P95_TAIL = 0.05
MAX_WORKERS = 100_000


def erlang_c(workers: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c (1.0 when the queue is unstable)."""
    if offered_load <= 0:
        return 0.0
    if workers <= offered_load:
        return 1.0
    blocking = 1.0  # Erlang B by the stable recursion B(k) = aB(k-1) / (k + aB(k-1))
    for k in range(1, workers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)
    return workers * blocking / (workers - offered_load * (1.0 - blocking))


def wait_tail(workers: int, arrival_rate: float, mean_service_s: float, wait_s: float) -> float:
    """P(wait > wait_s) in M/M/c."""
    load = arrival_rate * mean_service_s
    if load <= 0:
        return 0.0
    if workers <= load:
        return 1.0
    decay = (workers - load) / mean_service_s
    return erlang_c(workers, load) * math.exp(-decay * wait_s)


def workers_needed(arrival_rate: float, mean_service_s: float, target_wait_s: float) -> int | None:
    """Smallest c with p95 wait <= target; 0 without load, None beyond ``MAX_WORKERS``."""
    load = arrival_rate * mean_service_s
    if arrival_rate <= 0:
        return 0
    if load <= 0:
        return 1
    workers = max(1, math.floor(load) + 1)
    while workers <= MAX_WORKERS:
        if wait_tail(workers, arrival_rate, mean_service_s, target_wait_s) <= P95_TAIL:
            return workers
        workers += 1
    return None
