"""The effective capacity plan ``check`` and ``stats`` print: which queue may use how many
slots of ``concurrency`` (docs/long-tasks.md).

Read from the same rule the dispatcher applies (``scheduler.allowances``) with the app idle:
a queue may use every slot but those reserved for the queues above it (a reserve keeps
``reserve x slots``), in whole messages of its ``slots``, and never more than its own
``max_concurrency`` messages; what the reserves keep and the starvation bound promise is
shown beside it, and a queue's own timeout (how long one of its deliveries may hold its
slots).
"""

from __future__ import annotations

from typing import Any

from priority_pubsub.delivery.scheduler import QueueLimits, allowances
from priority_pubsub.settings.config import Settings


def capacity_plan(settings: Settings) -> list[dict[str, Any]]:
    """Per queue, highest first: its most slots and messages at once (the rest idle) and its
    settings. ``most_workers`` is slots (a worker is one slot of ``concurrency``);
    ``kept_for_higher`` the slots the reserves above it keep."""
    limits = [QueueLimits(q.reserve, q.max_concurrency, q.slots) for q in settings.queues]
    most = allowances(limits, [0] * len(limits), settings.concurrency)
    plan = []
    kept_above = 0
    for queue, messages in zip(settings.queues, most, strict=True):
        plan.append({"queue": queue.name, "most_workers": messages * queue.slots,
                     "most_messages": messages, "slots": queue.slots,
                     "reserve": queue.reserve, "kept_for_higher": kept_above,
                     "max_concurrency": queue.max_concurrency,
                     "max_wait_s": queue.max_wait_s, "wait_slo_s": queue.wait_slo_s,
                     "timeout_s": queue.timeout_s})
        kept_above += queue.reserve * queue.slots
    return plan


def plan_lines(settings: Settings) -> list[str]:
    """The plan as lines for a terminal (in slots once any queue costs more than one)."""
    weighed = any(q.slots > 1 for q in settings.queues)
    unit = "slots" if weighed else "workers"
    lines = [f"capacity plan: concurrency {settings.concurrency}"
             f"{' slots' if weighed else ''} ({settings.scheduling})"]
    for entry in capacity_plan(settings):
        notes = []
        if entry["slots"] > 1:
            notes.append(f"{entry['slots']} slots per message")
        if entry["reserve"]:
            kept = entry["reserve"] * entry["slots"]
            notes.append(f"{kept} reserved for it" + (
                f" ({entry['reserve']} messages)" if entry["slots"] > 1 else ""))
        if entry["kept_for_higher"]:
            notes.append(f"{entry['kept_for_higher']} kept for higher queues")
        if entry["max_concurrency"] is not None:
            notes.append(f"max_concurrency {entry['max_concurrency']}")
        if entry["max_wait_s"] is not None:
            notes.append(f"served at least once per {entry['max_wait_s']:g} s")
        if entry["timeout_s"] is not None:
            notes.append(f"a delivery cancelled after {entry['timeout_s']:g} s")
        detail = f" ({'; '.join(notes)})" if notes else ""
        most = f"up to {entry['most_workers']} {unit}"
        if entry["slots"] > 1:
            most += f" = {entry['most_messages']} messages"
        lines.append(f"  {entry['queue']}: {most}{detail}")
    return lines
