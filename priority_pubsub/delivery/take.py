"""One take's state: what it may fill, what is at the app, what it holds.

A take (``Dispatcher.take``) lasts from a receiver's request to the messages it returns. Its
counts change with every receive of the take and mean nothing after it, so they live in an
object made for that take, not on the long-lived dispatcher; the dispatcher's own state is
the rules derived from the live settings and the clocks that span takes (starvation, rates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from priority_pubsub.core.message import Message


class Take:
    """The counts one take decides by, and the messages it holds until it returns them.

    ``busy`` and ``free`` include the messages this take has received, so the capacity rule
    (``scheduler.allowances``) asked mid-take counts them as if they were at the app already;
    ``busy_at_start`` and ``free_at_start`` are how the take found them, what a wake-up's
    choice counts from.
    """

    __slots__ = ("busy", "busy_at_start", "free", "free_at_start", "holding", "in_hand")

    def __init__(self, free: int, busy: list[int]) -> None:
        self.free = free
        """Free slots of ``concurrency`` left, this take's messages counted in."""
        self.free_at_start = free
        self.busy = busy
        """Per queue (by priority), messages at the app, this take's counted in."""
        self.busy_at_start: tuple[int, ...] = tuple(busy)
        self.in_hand: list[Message] = []
        """Received and not yet returned or handed back: what an abandoned take hands back."""
        self.holding: int | None = None
        """The due queue the free slots are held for (the starvation bound's slot hold)."""

    @classmethod
    def begin(cls, free: int, busy: Sequence[int] | Mapping[str, int],
              names: Sequence[str]) -> Take:
        """A take of ``free`` slots, ``busy`` by queue name or by priority (none if empty)."""
        if isinstance(busy, Mapping):
            return cls(free, [busy.get(name, 0) for name in names])
        return cls(free, list(busy) if busy else [0] * len(names))

    def count_in(self, messages: Sequence[Message], index: Mapping[str, int],
                 sign: int) -> None:
        """Count ``messages`` as at the app (``sign`` 1) or no longer (-1)."""
        for message in messages:
            self.busy[index[message.queue]] += sign
            self.free -= sign * message.slots

    def received(self, batch: list[Message], index: Mapping[str, int]) -> None:
        """A receive of this take brought ``batch``: held, and counted as at the app."""
        self.in_hand += batch
        self.count_in(batch, index, 1)

    def let_go(self) -> list[Message]:
        """What the take holds, which it no longer does (returned or being handed back)."""
        in_hand, self.in_hand = self.in_hand, []
        return in_hand

    def slots_now(self, slots: Sequence[int]) -> int:
        """The slots this take may fill at most: the free ones and those in use, with
        ``slots`` the slots one message of each queue takes."""
        return self.free + sum(n * k for n, k in zip(self.busy, slots, strict=True))
