"""Which queues this replica takes from: the operator's pauses and drain (the monitor's
actions), and the config's pauses (``queues[].paused``, set by a live reload).

The operator's holds are runtime only and per replica: a restart forgets them (the monitor
page says so). The config's pauses are every replica's that reads the same config, and last
as long as the config says so. A queue is closed while either holds it; the monitor shows
which. The dispatcher skips the queues ``closed`` names; an operator's change calls the
listeners (the receiver abandons a take under way, so a wait on a queue just paused ends and
one just resumed begins); a reload's change wakes a dispatcher waiting because every queue
was closed, and the dispatcher ends its own wait (``Dispatcher``: what it caught is
delivered, but what belongs to a queue closed meanwhile goes back unseen). Each operator's
change is shown in a metric (``priority_pubsub_queue_paused``, ``_draining``); the monitor
journals and logs it as an admin action.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from priority_pubsub.core.message import now_ms
from priority_pubsub.settings.live import LiveSettings
from priority_pubsub.telemetry.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Hold:
    """A pause or a drain: since when (epoch ms) and why."""

    since_ms: int
    reason: str


class QueueControl:
    def __init__(self, live: LiveSettings, metrics: Metrics | None = None) -> None:
        self._live = live
        self._metrics = metrics
        self.paused: dict[str, Hold] = {}
        """The operator's pauses (the config's are ``live.paused``)."""
        self.drain: Hold | None = None
        self.closed: frozenset[str] = frozenset()
        """Queues not to take from now (read on every take: kept precomputed)."""
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._labelled: set[str] = set()
        self._label(live.names)
        self._recompute()
        live.on_change(self._live_changed)

    def _label(self, names: tuple[str, ...]) -> None:
        if self._metrics is not None:
            for name in names:
                if name not in self._labelled:
                    self._labelled.add(name)
                    self._metrics.queue_paused.labels(name).set(float(name in self.paused))

    def paused_by_config(self, queue: str) -> bool:
        """Whether the config in force pauses ``queue`` (on every replica)."""
        return queue in self._live.paused

    def _live_changed(self) -> None:
        """The queues or the config's pauses may have changed (a reload, a queue added)."""
        self._label(self._live.names)
        before = self.closed
        self._recompute()
        if self.closed != before:
            self._wake()

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
        if queue not in self._live.index:
            raise KeyError(queue)

    def _recompute(self) -> None:
        names = self._live.names
        if self.drain is not None:
            self.closed = frozenset(names)
        else:
            held = self._live.paused
            self.closed = frozenset(n for n in names if n in self.paused or n in held)

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _changed_now(self) -> None:
        self._recompute()
        if self._metrics is not None:
            for name in self._live.names:
                self._metrics.queue_paused.labels(name).set(float(name in self.paused))
            self._metrics.draining.set(float(self.drain is not None))
        self._wake()
        for listener in self._listeners:
            listener()
