"""Which queues this replica takes from: the operator's pauses and drain (the monitor's actions).

Runtime only and per replica: a restart forgets them (the monitor page says so). The
dispatcher skips the queues ``closed`` names; a change calls the listeners (the receiver
abandons a take under way, so a wait on a queue just paused ends and one just resumed begins).
Each change is shown in a metric (``priority_pubsub_queue_paused``, ``_draining``); the
monitor journals and logs it as an admin action.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from priority_pubsub.core.message import now_ms
from priority_pubsub.telemetry.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Hold:
    """A pause or a drain: since when (epoch ms) and why."""

    since_ms: int
    reason: str


class QueueControl:
    def __init__(self, queue_names: tuple[str, ...], metrics: Metrics | None = None) -> None:
        self._names = queue_names
        self._metrics = metrics
        self.paused: dict[str, Hold] = {}
        self.drain: Hold | None = None
        self.closed: frozenset[int] = frozenset()
        """Queue indices not to take from now (read on every take: kept precomputed)."""
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        if metrics is not None:
            for name in queue_names:
                metrics.queue_paused.labels(name).set(0)

    def add(self, name: str) -> None:
        """A queue added while running (the lowest): closed too while draining."""
        if name in self._names:
            return
        self._names = (*self._names, name)
        self._recompute()  # no retake: what a take holds is still wanted (streams say when)
        if self._metrics is not None:
            self._metrics.queue_paused.labels(name).set(0)

    @property
    def draining(self) -> bool:
        return self.drain is not None

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def pause(self, queue: str, reason: str) -> bool:
        """Stop taking from ``queue``; False when it was already paused."""
        self._require_known(queue)
        if queue in self.paused:
            return False
        self.paused[queue] = Hold(now_ms(), reason)
        self._changed_now()
        return True

    def resume(self, queue: str) -> bool:
        """Take from ``queue`` again; False when it was not paused."""
        self._require_known(queue)
        if self.paused.pop(queue, None) is None:
            return False
        self._changed_now()
        return True

    def start_drain(self, reason: str) -> bool:
        if self.drain is not None:
            return False
        self.drain = Hold(now_ms(), reason)
        self._changed_now()
        return True

    def end_drain(self) -> bool:
        if self.drain is None:
            return False
        self.drain = None
        self._changed_now()
        return True

    async def wait_for_change(self) -> None:
        await self._changed.wait()

    def _require_known(self, queue: str) -> None:
        if queue not in self._names:
            raise KeyError(queue)

    def _recompute(self) -> None:
        every = range(len(self._names))
        self.closed = frozenset(every if self.drain is not None else
                                (i for i in every if self._names[i] in self.paused))

    def _changed_now(self) -> None:
        self._recompute()
        if self._metrics is not None:
            for name in self._names:
                self._metrics.queue_paused.labels(name).set(float(name in self.paused))
            self._metrics.draining.set(float(self.drain is not None))
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for listener in self._listeners:
            listener()
