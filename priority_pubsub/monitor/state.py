"""What the monitor shows, as one JSON-ready document (``/api/v1/state``, and the page).

It reads this replica's parts: the settings in force (their hash, when they were loaded,
the last refused reload: when every replica runs the new config), the app gate, the
receiver (what is in flight), the queue control (the operator's pauses, the config's),
the delivery observer (last delivery, its own dead letters), the metrics
history (rates, sparklines) and the broker depths the sidecar's refresher last read (the
broker's figures, labelled so). Never a message body; reasons pass through ``redact``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from priority_pubsub.app.gate import AppGate
from priority_pubsub.core.message import Message, now_ms
from priority_pubsub.core.pod import Pod
from priority_pubsub.core.redaction import redact
from priority_pubsub.delivery.cancel import Running
from priority_pubsub.delivery.control import Hold, QueueControl
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.drivers.base import DeadLetter, QueueDepth
from priority_pubsub.monitor.dead_letters import DeadLetterDesk, DeadLetterFilter
from priority_pubsub.monitor.history import History
from priority_pubsub.monitor.waiting import WaitingDesk
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.observer import DeliveryObserver

API_VERSION = 1
RUNTIME_ONLY = ("Pauses and drain from this page are this replica's alone, kept in memory: a "
                "restart of the sidecar forgets them. A pause by the config "
                "(queues[].paused) holds every replica that reads it.")
SHOWN_DEAD_LETTERS = 200


@dataclass(frozen=True, slots=True)
class DepthReading:
    """A broker depth and when the sidecar's refresher read it (monotonic seconds)."""

    depth: QueueDepth
    at_s: float


@dataclass(slots=True)
class MonitorSources:
    """The parts the monitor reads, handed over by the composition root."""

    live: LiveSettings
    gate: AppGate
    receiver: Receiver
    control: QueueControl
    observer: DeliveryObserver
    history: History
    dead_letters: DeadLetterDesk
    depths: dict[str, DepthReading]
    connected: Callable[[], bool]
    running: Running = field(default_factory=Running)
    """The deliveries at the app now (the worker's): what an operator may cancel."""
    waiting: WaitingDesk | None = None
    """The first messages waiting in a queue, and their promote."""


def drain_state(control: QueueControl, in_flight: int) -> str | None:
    """``drained`` once a drain has nothing left in flight, ``draining`` before; None."""
    if not control.draining:
        return None
    return "drained" if in_flight == 0 else "draining"


async def snapshot(src: MonitorSources, selected: DeadLetterFilter,
                   waiting: str = "") -> dict[str, Any]:
    """``waiting``: the queue whose first waiting messages to list (none: none)."""
    now = src.history.now()
    rates = src.history.per_minute(now)
    held = src.receiver.held()
    wall_ms = now_ms()
    queues = [_queue_row(src, name, priority, rates[name], wall_ms)
              | {"since_start": now.counts[name]}
              for priority, name in enumerate(src.live.names)]
    flag_starvation(queues)
    listing = await src.dead_letters.listing(selected, SHOWN_DEAD_LETTERS)
    settings = src.live.settings
    return {
        "v": API_VERSION,
        "replica": {"host": Pod.current().replica, "pid": os.getpid(),
                    "driver": settings.driver.type,
                    "scheduling": settings.scheduling},
        "generated_ms": wall_ms,
        "config": config_state(src.live),
        "runtime_only": RUNTIME_ONLY,
        "overview": _overview(src, held, wall_ms),
        "queues": queues,
        "in_flight": [_in_flight_row(m, wall_ms, settings.lease.duration_s)
                      | {"at_app": src.running.at_app(m.queue, m.id)}
                      for m in sorted(held, key=lambda m: m.received_ms)],
        "waiting": await _waiting(src, waiting),
        "dead_letters": {
            "source": listing.source, "queue": listing.queue,
            "actions": src.dead_letters.actionable,
            "filter": {"reason": selected.reason, "queue": selected.queue, "id": selected.id},
            "items": [_dead_letter_row(d) for d in listing.letters],
        },
    }


async def _waiting(src: MonitorSources, queue: str) -> dict[str, Any]:
    """Whether a waiting message can be promoted here (``why_not``), and the first ones
    waiting in ``queue`` with the queues above it, when the page asks about one."""
    desk = src.waiting
    why_not = "no waiting messages here" if desk is None else desk.why_not
    if desk is None or not queue or queue not in src.live.index:
        return {"why_not": why_not, "queue": None, "targets": [], "items": []}
    return {"why_not": why_not, "queue": queue, "targets": desk.higher_than(queue),
            "items": [{"id": m.id, "enqueued_ms": m.first_seen_ms, "attempts": m.attempts}
                      for m in await desk.listing(queue)]}


def config_state(live: LiveSettings) -> dict[str, Any]:
    """The config in force: its files' hash and when it was loaded (a replica still showing
    the old hash has not taken the new file yet), and the last reload refused, if any."""
    refused = live.last_refused
    return {"hash": live.source_hash or None, "loaded_ms": live.loaded_ms,
            "last_refused": None if refused is None else {
                "at_ms": refused.at_ms, "reason": redact(refused.reason)}}


def _overview(src: MonitorSources, held: list[Message], wall_ms: int) -> dict[str, Any]:
    gate, health = src.gate, src.gate.health
    blocked = gate.blocked()
    state = "down" if not health.up else ("paused" if blocked else "up")
    drain = src.control.drain
    return {
        "app": {"state": state, "reason": redact(blocked) if blocked else None,
                "for_s": round(time.monotonic() - health.since, 1)},
        "workers": {"busy": src.receiver.at_app, "slots_in_use": src.receiver.slots_in_use,
                    "in_flight": len(held),
                    "concurrency": src.live.settings.concurrency,
                    "effective_concurrency": gate.limiter.limit},
        "reserve": _reserve_plan(src.live, held),
        "oldest_in_flight_s": (round((wall_ms - min(m.received_ms for m in held)) / 1000, 1)
                               if held else None),
        "driver_connected": src.connected(),
        "drain": None if drain is None else {
            **_hold(drain), "state": drain_state(src.control, len(held))},
    }


def _reserve_plan(live: LiveSettings, held: list[Message]) -> list[dict[str, Any]] | None:
    """Per queue, when any has a ``reserve``, a ``max_concurrency`` or ``slots`` above 1
    (docs/long-tasks.md): those settings and its messages in flight now; None otherwise."""
    if not any(q.reserve or q.max_concurrency is not None or q.slots > 1 for q in live.queues):
        return None
    busy = Counter(m.queue for m in held)
    return [{"queue": q.name, "reserve": q.reserve, "max_concurrency": q.max_concurrency,
             "slots": q.slots, "in_flight": busy[q.name]} for q in live.queues]


def _queue_row(src: MonitorSources, name: str, priority: int, per_minute: dict[str, float],
               wall_ms: int) -> dict[str, Any]:
    reading = src.depths.get(name)
    last = src.observer.last_received_ms.get(name)
    paused = src.control.paused.get(name)
    return {
        "name": name, "priority": priority,
        "paused": None if paused is None else _hold(paused),
        "paused_by_config": src.control.paused_by_config(name),
        "broker": None if reading is None else {
            "visible": reading.depth.visible, "in_flight": reading.depth.in_flight,
            "delayed": reading.depth.delayed,
            "oldest_age_s": (None if reading.depth.oldest_age_s is None
                             else round(reading.depth.oldest_age_s, 1)),
            "read_s_ago": round(time.monotonic() - reading.at_s, 1),
        },
        "per_minute": per_minute,
        "last_delivery_s_ago": None if last is None else round((wall_ms - last) / 1000, 1),
        "starved": None,
        "sparkline": src.history.sparkline(name),
    }


def flag_starvation(queues: list[dict[str, Any]]) -> None:
    """A queue is starved when it waits (the broker shows a backlog), is not paused (by the
    operator or the config), took nothing in the last minute, and a higher queue did: None
    where the broker cannot tell."""
    served_above = False
    for row in queues:
        broker = row["broker"]
        if broker is not None and broker["visible"] is not None:
            row["starved"] = bool(served_above and broker["visible"] > 0
                                  and row["paused"] is None
                                  and not row.get("paused_by_config")
                                  and row["per_minute"]["delivered"] == 0)
        served_above = served_above or row["per_minute"]["delivered"] > 0


def _in_flight_row(message: Message, wall_ms: int, lease_s: float) -> dict[str, Any]:
    renewed_ms = message.lease.deadline_ms - int(lease_s * 1000)
    return {
        "id": message.id, "queue": message.queue, "attempt": message.attempt,
        "slots": message.slots,
        "elapsed_s": round((wall_ms - message.received_ms) / 1000, 1),
        "lease_renewed_s_ago": (round((wall_ms - renewed_ms) / 1000, 1)
                                if renewed_ms > message.received_ms + 500 else None),
    }


def _dead_letter_row(letter: DeadLetter) -> dict[str, Any]:
    return {"id": letter.id, "source": letter.source,
            "reason": None if letter.reason is None else redact(letter.reason),
            "attempts": letter.attempts, "first_seen_ms": letter.first_seen_ms,
            "last_seen_ms": letter.last_seen_ms}


def _hold(hold: Hold) -> dict[str, Any]:
    return {"since_ms": hold.since_ms, "reason": hold.reason}
