"""Which queue a free worker takes from next: a pure function of config, rng and empties.

``strict``: the highest non-empty queue always wins. ``weighted``: each free slot draws a
queue by weight among the queues not known to be empty, so under saturation shares follow
the weights (6/3/1 -> 60/30/10 %) and no queue starves; empty queues give their share away.

Before either mode picks, the capacity rule (``allowances``) decides how many messages each
queue may take at all: reserved workers of higher queues stay free, per-queue limits hold
(docs/long-tasks.md). ``overdue`` names the queues the starvation bound promotes.

Slots (``queues[].slots``): ``concurrency`` counts slots, and a message of a queue with
``slots: k`` occupies k of them while it runs; everything free here (``free``, ``slots``) is
free slots. A heavy message is taken only when k are free beyond the reserves above it, so a
steady stream of light tasks could always take a freed slot first: when a heavy queue is due
(``overdue``) and shut out only for want of free slots (``short_of_slots``), the free slots
are held for it (``allowances(..., holding=)``) until k are.
Nothing here does I/O or reads a clock (the time is passed in), so tests replay decisions
exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Scheduling = Literal["strict", "weighted"]


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """One queue's share of the slots: ``reserve`` messages' slots kept from lower queues, at
    most ``max_concurrency`` (None: no own limit) messages at the app at once, each occupying
    ``slots`` of ``concurrency`` while it runs."""

    reserve: int = 0
    max_concurrency: int | None = None
    slots: int = 1


def unused_reserves(limits: Sequence[QueueLimits], busy: Sequence[int]) -> list[int]:
    """Per queue, the slots its reserve keeps that its own messages do not use now:
    ``max(0, reserve - busy) * slots`` (a reserve holds ``reserve`` of its messages)."""
    return [max(0, limit.reserve - held) * limit.slots
            for limit, held in zip(limits, busy, strict=True)]


def allowances(limits: Sequence[QueueLimits], busy: Sequence[int], free: int,
               holding: int | None = None) -> list[int]:
    """How many more messages each queue (highest first) may take now.

    ``busy[k]`` is queue k's messages at the app, ``free`` the free slots. The reserved but
    unused slots above queue j, ``U(j)`` (the sum of ``unused_reserves`` above it), are not
    j's: j may take while ``free - U(j) >= slots_j``, so ``(free - U(j)) // slots_j`` messages
    now, and never past its own ``max_concurrency``. A take within a higher queue's reserve
    lowers ``free`` and ``U`` alike, one beyond it only ``free``: the answer shrinks as a take
    goes on, never grows, so a receive asking for it never needs to hand anything back.

    ``holding``: the free slots are held for that queue (``short_of_slots``): it may take as
    above, each queue above it only within its own unused reserve (a reserve is always its
    queue's), and every queue below it nothing. Its own room ``free - U(holding)`` then never
    shrinks but for its own takes, so it grows as running messages end until a heavy message
    fits; the answers still only shrink as a take goes on.
    """
    unused = unused_reserves(limits, busy)
    allowed: list[int] = []
    unused_above = 0
    for index, (limit, held) in enumerate(zip(limits, busy, strict=True)):
        if holding is None or index == holding:
            room = (free - unused_above) // limit.slots
        elif index < holding:
            room = min(free, unused[index]) // limit.slots
        else:
            room = 0
        if limit.max_concurrency is not None:
            room = min(room, limit.max_concurrency - held)
        allowed.append(max(0, room))
        unused_above += unused[index]
    return allowed


def short_of_slots(limits: Sequence[QueueLimits], busy: Sequence[int], free: int,
                   capacity: int, queue: int) -> bool:
    """Whether ``queue`` is shut out now only for want of free slots, and holding them for it
    would let one of its messages in: below its ``max_concurrency``, and its ``slots`` fit in
    ``capacity`` (the slots now: free plus in use) beside every reserve above it once their
    messages have ended. (Under a lowered effective concurrency they may not: a hold then
    would idle every slot and never end.)"""
    limit = limits[queue]
    if limit.max_concurrency is not None and busy[queue] >= limit.max_concurrency:
        return False
    if allowances(limits, busy, free)[queue] > 0:
        return False
    reserved_above = sum(above.reserve * above.slots for above in limits[:queue])
    return capacity - reserved_above >= limit.slots


def overdue(max_wait_s: Sequence[float | None], last_tried: Sequence[float],
            now: float) -> list[tuple[int, float]]:
    """``(queue, seconds untried)`` of the queues untried for their ``max_wait_s`` or longer,
    most overdue first: each gets one try ahead of the queues above it."""
    late = [
        (index, now - tried)
        for index, (bound, tried) in enumerate(zip(max_wait_s, last_tried, strict=True))
        if bound is not None and now - tried >= bound
    ]
    return sorted(late, key=lambda item: -item[1])


def plan(
    scheduling: Scheduling,
    weights: Sequence[int],
    slots: int,
    empty: frozenset[int],
    rng: random.Random,
    allowed: Sequence[int] | None = None,
    costs: Sequence[int] | None = None,
) -> list[tuple[int, int]]:
    """Return ``(queue_index, how_many)`` pairs to try, in order, for ``slots`` free slots.

    Strict offers every slot to each non-empty queue in priority order (the caller stops when
    full). Weighted splits the slots among non-empty queues by weighted draws, each draw of
    queue i using ``costs[i]`` slots (its ``queues[].slots``; 1 when not given) and drawn
    with ``weight / cost``, so the weights share the app's slots, not its message count.
    ``allowed`` (from ``allowances``) caps each queue; a queue allowed nothing is not offered
    any.
    """
    cost = list(costs) if costs is not None else [1] * len(weights)
    caps = [min(cap, slots // cost[i]) for i, cap in enumerate(
        allowed if allowed is not None else [slots] * len(weights))]
    candidates = [i for i in range(len(weights)) if i not in empty and caps[i] > 0]
    if slots <= 0 or not candidates:
        return []
    if scheduling == "strict":
        return [(index, caps[index]) for index in candidates]
    counts: Counter[int] = Counter()
    while candidates:
        draws = rng.choices(candidates, weights=[weights[i] / cost[i] for i in candidates],
                            k=slots // min(cost[i] for i in candidates))
        for index in draws:
            if counts[index] < caps[index] and cost[index] <= slots:
                counts[index] += 1
                slots -= cost[index]
        candidates = [i for i in candidates if counts[i] < caps[i] and cost[i] <= slots]
    return sorted(counts.items())


def share_by_weight(
    available: Sequence[int], weights: Sequence[int], slots: int, rng: random.Random,
    costs: Sequence[int] | None = None,
) -> list[int]:
    """How many of each queue's ``available`` messages to keep for ``slots`` free slots,
    drawn by weight as ``plan`` draws (a queue with nothing left gives its draws away; one
    whose messages no longer fit in the slots left is passed over).

    The weighted wake-up path uses it: when one wait brought back more messages than free
    slots, the kept ones follow the weights too; keeping the highest priorities there was a
    small bias toward high at every wake from idle."""
    cost = list(costs) if costs is not None else [1] * len(available)
    kept = [0] * len(available)
    slots = min(slots, sum(n * c for n, c in zip(available, cost, strict=True)))
    while slots > 0:
        empty = frozenset(i for i, n in enumerate(available) if kept[i] >= n)
        picks = plan("weighted", weights, slots, empty, rng, costs=cost)
        if not picks:
            break
        for index, count in picks:
            take = min(count, available[index] - kept[index])
            kept[index] += take
            slots -= take * cost[index]
    return kept
