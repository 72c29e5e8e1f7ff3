"""The effective capacity plan ``check`` and ``stats`` print: which queue may use how many
workers (docs/long-tasks.md).

Read from the same rule the dispatcher applies (``scheduler.allowances``) with the app idle:
a queue may use every worker but those reserved for the queues above it, and never more than
its own ``max_concurrency``; what the reserves keep and the starvation bound promise is shown
beside it, and a queue's own timeout (how long one of its deliveries may hold a worker).
"""

from __future__ import annotations

from typing import Any

from priority_pubsub.delivery.scheduler import QueueLimits, allowances
from priority_pubsub.settings.config import Settings


def capacity_plan(settings: Settings) -> list[dict[str, Any]]:
    """Per queue, highest first: its most workers at once (the rest idle) and its settings."""
    limits = [QueueLimits(q.reserve, q.max_concurrency) for q in settings.queues]
    most = allowances(limits, [0] * len(limits), settings.concurrency)
    plan = []
    kept_above = 0
    for queue, workers in zip(settings.queues, most, strict=True):
        plan.append({"queue": queue.name, "most_workers": workers, "reserve": queue.reserve,
                     "kept_for_higher": kept_above, "max_concurrency": queue.max_concurrency,
                     "max_wait_s": queue.max_wait_s, "wait_slo_s": queue.wait_slo_s,
                     "timeout_s": queue.timeout_s})
        kept_above += queue.reserve
    return plan


def plan_lines(settings: Settings) -> list[str]:
    """The plan as lines for a terminal."""
    lines = [f"capacity plan: concurrency {settings.concurrency} ({settings.scheduling})"]
    for entry in capacity_plan(settings):
        notes = []
        if entry["reserve"]:
            notes.append(f"{entry['reserve']} reserved for it")
        if entry["kept_for_higher"]:
            notes.append(f"{entry['kept_for_higher']} kept for higher queues")
        if entry["max_concurrency"] is not None:
            notes.append(f"max_concurrency {entry['max_concurrency']}")
        if entry["max_wait_s"] is not None:
            notes.append(f"served at least once per {entry['max_wait_s']:g} s")
        if entry["timeout_s"] is not None:
            notes.append(f"a delivery cancelled after {entry['timeout_s']:g} s")
        detail = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"  {entry['queue']}: up to {entry['most_workers']} workers{detail}")
    return lines
