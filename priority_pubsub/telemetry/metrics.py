"""Prometheus metrics (docs/operations/index.md). Labels are bounded sets: queue, priority,
outcome, empty.

Each sidecar owns its registry, so tests can run several in one process.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from priority_pubsub.core.outcome import Kind

# 10 ms .. 1 h: short acks and hour-long tasks both land in a meaningful bucket.
DURATION_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600,
)


def _tasks_alive() -> float:
    """Counted on the loop's thread, where /metrics is rendered; NaN anywhere else."""
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:
        return float("nan")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.received = Counter(
            "priority_pubsub_messages_received", "Messages leased from a queue.",
            ["queue", "priority"], registry=r,
        )
        self.settled = Counter(
            "priority_pubsub_messages_settled", "Attempts settled, by outcome.",
            ["queue", "priority", "outcome"], registry=r,
        )
        self.forward_seconds = Histogram(
            "priority_pubsub_forward_seconds", "Time the app took to answer one attempt.",
            ["queue"], buckets=DURATION_BUCKETS, registry=r,
        )
        self.wait_seconds = Histogram(
            "priority_pubsub_wait_seconds", "Time from enqueue to receive.",
            ["queue"], buckets=DURATION_BUCKETS, registry=r,
        )
        self.in_flight = Gauge(
            "priority_pubsub_in_flight",
            "Messages held now: at the app, or settling after it answered.", registry=r,
        )
        self.concurrency = Gauge(
            "priority_pubsub_concurrency",
            "Configured concurrency: the most messages in flight at once (the app's capacity).",
            registry=r,
        )
        self.loop_stalls = Counter(
            "priority_pubsub_event_loop_stalls",
            "Times the event loop stood still longer than server.stall_after_s.", registry=r,
        )
        self.queue_depth = Gauge(
            "priority_pubsub_queue_depth", "Visible messages per queue, when the broker tells.",
            ["queue"], registry=r,
        )
        self.lease_extensions = Counter(
            "priority_pubsub_lease_extensions", "Lease extensions made while the app works.",
            ["queue"], registry=r,
        )
        self.receive_calls = Counter(
            "priority_pubsub_receive_calls", "Receive calls to the broker, by whether empty.",
            ["queue", "empty"], registry=r,
        )
        # The app's state: read from the app gate at scrape time (set_function).
        self.app_up = Gauge(
            "priority_pubsub_app_up", "1 while the app is reachable and healthy, else 0.",
            registry=r,
        )
        self.app_pauses = Counter(
            "priority_pubsub_app_pauses", "Times deliveries were paused, by cause "
            "(unreachable, unhealthy, busy, circuit_breaker).", ["cause"], registry=r,
        )
        self.circuit_breaker_state = Gauge(
            "priority_pubsub_circuit_breaker_state",
            "App-channel circuit breaker: 0 closed, 1 half-open, 2 open.", registry=r,
        )
        self.effective_concurrency = Gauge(
            "priority_pubsub_effective_concurrency",
            "Deliveries allowed at once now (lowered by the app's 429/503 Retry-After).",
            registry=r,
        )
        self.oldest_wait_seconds = Gauge(
            "priority_pubsub_oldest_wait_seconds", "Age of the oldest waiting message per "
            "queue, when the broker tells (aggregate replicas with max).", ["queue"], registry=r,
        )
        self.workers_needed = Gauge(
            "priority_pubsub_workers_needed", "Workers a queue needs for its wait_slo_s "
            "(Erlang C over server.capacity_window_s; aggregate replicas with sum).",
            ["queue"], registry=r,
        )
        self.promotions = Counter(
            "priority_pubsub_promotions", "Messages taken ahead of higher queues by the "
            "starvation bound (queues[].max_wait_s).", ["queue"], registry=r,
        )
        self.slots_held = Counter(
            "priority_pubsub_slots_held_seconds", "Seconds free slots were held for a due "
            "queue of heavy messages (queues[].slots, max_wait_s) until its slots were free.",
            ["queue"], registry=r,
        )
        self.rate_limited = Counter(
            "priority_pubsub_rate_limited_seconds", "Seconds a queue's rate (queues[].rate) "
            "kept it out while the capacity rule let it take.", ["queue"], registry=r,
        )
        # The operator's runtime holds (the monitor's pause and drain).
        self.queue_paused = Gauge(
            "priority_pubsub_queue_paused",
            "1 while an operator paused taking from this queue on this replica (runtime only).",
            ["queue"], registry=r,
        )
        self.draining = Gauge(
            "priority_pubsub_draining",
            "1 while an operator drains this replica: nothing new is taken (runtime only).",
            registry=r,
        )
        self.config_reloads = Counter(
            "priority_pubsub_config_reloads", "Live reloads of the config (SIGHUP, the file "
            "changed), by result: applied, or refused (restart-only keys, an invalid file).",
            ["result"], registry=r,
        )
        for result in ("applied", "refused"):
            self.config_reloads.labels(result)
        self.deletion_cost_patches = Counter(
            "priority_pubsub_deletion_cost_patches", "Patches of this pod's deletion cost "
            "(kubernetes.deletion_cost), by result: applied, or failed (refused, unreachable, "
            "no answer in time).", ["result"], registry=r,
        )
        self.event_loop_tasks = Gauge(
            "priority_pubsub_event_loop_tasks",
            "asyncio tasks alive in the sidecar's loop at scrape time (one that only grows "
            "is a leak; bench/soak.py watches it).", registry=r,
        )
        self.event_loop_tasks.set_function(_tasks_alive)

        self._queues: dict[tuple[str, int], QueueMetrics] = {}

    def queue(self, name: str, priority: int) -> QueueMetrics:
        """The children of every labelled metric for one queue, resolved once.

        ``labels()`` costs a lock and a few dict lookups per call; on the delivery path that
        is several calls per message, so the bound children are kept.
        """
        found = self._queues.get((name, priority))
        if found is None:
            level = str(priority)
            found = QueueMetrics(
                received=self.received.labels(name, level),
                settled={kind.value: self.settled.labels(name, level, kind.value)
                         for kind in Kind},
                forward_seconds=self.forward_seconds.labels(name),
                wait_seconds=self.wait_seconds.labels(name),
                lease_extensions=self.lease_extensions.labels(name),
                receive_calls={True: self.receive_calls.labels(name, "true"),
                               False: self.receive_calls.labels(name, "false")},
            )
            self._queues[(name, priority)] = found
        return found

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class QueueMetrics:
    """Pre-bound metric children of one queue (see ``Metrics.queue``)."""

    received: Any
    settled: dict[str, Any]
    forward_seconds: Any
    wait_seconds: Any
    lease_extensions: Any
    receive_calls: dict[bool, Any]
