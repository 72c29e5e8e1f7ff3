"""The settings in force while the sidecar runs, and their one owner: ``LiveSettings``.

A live reload (``delivery.reload``: SIGHUP, or the config file changed) replaces the settings
here, whole and validated. Every part of the delivery path reads them through this owner (at
each take, each delivery, each settle) or keeps only what it derives from them (the
dispatcher's per-queue arrays, the limiter's ceiling) and derives it again when told of a
change (``on_change``). No part keeps a copy of its own, so a change is in force everywhere
at once: the listeners run on the loop, between two awaits.

The queues in force are the config's, highest priority first, then those added at run time
that the config does not list (a streamed topic unknown at start, ``add_queue``): a reload
keeps them at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from priority_pubsub.core.message import now_ms
from priority_pubsub.settings.config import QueueConfig, Settings

Listener = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A reload that was refused: when (epoch ms) and why, in one line (the restart-only
    keys it changed, or what is wrong with the file)."""

    at_ms: int
    reason: str


class LiveSettings:
    def __init__(self, settings: Settings, *, source_hash: str = "") -> None:
        self._listeners: list[Listener] = []
        self._added: tuple[str, ...] = ()
        """Queues added at run time that the config does not list, in the order added."""
        self.generation = 0
        """Counts the changes: what a part that derives something compares to know it is
        stale."""
        self.last_refused: Refusal | None = None
        """The last reload refused since start (the monitor shows it); None: none was."""
        self._set(settings, source_hash)

    @classmethod
    def of(cls, settings: Settings | LiveSettings) -> LiveSettings:
        """The owner given, or one made for fixed settings (a part built on its own, a
        test): the parts take either."""
        return settings if isinstance(settings, LiveSettings) else cls(settings)

    def _set(self, settings: Settings, source_hash: str) -> None:
        self.settings = settings
        """The validated settings in force."""
        self.source_hash = source_hash
        """The hash of the files they were read from (``settings.watch.content_hash``)."""
        self.loaded_ms = now_ms()
        """When they were loaded (epoch ms)."""
        listed = set(settings.queue_names)
        self._added = tuple(name for name in self._added if name not in listed)
        self.queues: tuple[QueueConfig, ...] = (
            *settings.queues, *(QueueConfig(name=name) for name in self._added))
        """The queues in force, highest priority first (added ones last: weight 1, no
        reserve or limit)."""
        self.names: tuple[str, ...] = tuple(queue.name for queue in self.queues)
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        """A queue's priority now (0 = highest)."""
        self._by_name = {queue.name: queue for queue in self.queues}
        self.paused: frozenset[str] = frozenset(q.name for q in settings.queues if q.paused)
        """Queues the config pauses (``queues[].paused``): no replica takes from them."""
        self.generation += 1

    def on_change(self, listener: Listener) -> None:
        """Call ``listener`` after every change (settings replaced, a queue added); it reads
        what it needs from here."""
        self._listeners.append(listener)

    def replace(self, settings: Settings, source_hash: str = "") -> None:
        """Put ``settings`` in force (a reload the reloader accepted) and tell the parts."""
        self._set(settings, source_hash)
        self._changed()

    def add_queue(self, name: str) -> bool:
        """Take from ``name`` too, below every queue in force; False when it already is."""
        if name in self.index:
            return False
        self._added = (*self._added, name)
        self._set(self.settings, self.source_hash)
        self._changed()
        return True

    def refused(self, reason: str) -> None:
        """Record a refused reload (the settings in force stay as they are)."""
        self.last_refused = Refusal(now_ms(), reason)

    def queue(self, name: str) -> QueueConfig | None:
        """Queue ``name``'s settings in force; None once a reload removed it (its messages
        still in flight finish under the global settings)."""
        return self._by_name.get(name)

    def timeout_s(self, queue: str) -> float:
        """How long the app may take for one of ``queue``'s deliveries."""
        found = self._by_name.get(queue)
        if found is not None and found.timeout_s is not None:
            return found.timeout_s
        return self.settings.app.timeout_s

    @property
    def names_view(self) -> Collection[str]:
        """The queue names in force, read at each use (for parts that test membership)."""
        return _Names(self)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()


class _Names(Collection[str]):
    __slots__ = ("_live",)

    def __init__(self, live: LiveSettings) -> None:
        self._live = live

    def __contains__(self, name: object) -> bool:
        return name in self._live.index

    def __iter__(self) -> Iterator[str]:
        return iter(self._live.names)

    def __len__(self) -> int:
        return len(self._live.names)
