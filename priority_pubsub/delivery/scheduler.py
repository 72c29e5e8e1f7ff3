"""Which queue a free worker takes from next: a pure function of config, rng and empties.

``strict``: the highest non-empty queue always wins. ``weighted``: each free slot draws a
queue by weight among the queues not known to be empty, so under saturation shares follow
the weights (6/3/1 -> 60/30/10 %) and no queue starves; empty queues give their share away.

Before either mode picks, the capacity rule (``allowances``) decides how many messages each
queue may take at all: reserved workers of higher queues stay free, per-queue limits hold
(docs/long-tasks.md). ``overdue`` names the queues the starvation bound promotes.
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
    """One queue's share of the workers: ``reserve`` kept from lower queues, at most
    ``max_concurrency`` (None: no own limit) at the app at once."""

    reserve: int = 0
    max_concurrency: int | None = None


def allowances(limits: Sequence[QueueLimits], busy: Sequence[int], free: int) -> list[int]:
    """How many more messages each queue (highest first) may take now.

    ``busy[k]`` is queue k's messages at the app, ``free`` the idle workers. The reserved but
    unused workers above queue j, ``U(j) = sum(max(0, reserve_k - busy_k) for k < j)``, are
    not j's: j may take while ``free > U(j)``, so at most ``free - U(j)`` now, and never past
    its own ``max_concurrency``. A take within a higher queue's reserve lowers ``free`` and
    ``U`` alike, one beyond it only ``free``: the answer shrinks as a take goes on, never
    grows, so a receive asking for it never needs to hand anything back.
    """
    allowed: list[int] = []
    unused_above = 0
    for limit, held in zip(limits, busy, strict=True):
        room = free - unused_above
        if limit.max_concurrency is not None:
            room = min(room, limit.max_concurrency - held)
        allowed.append(max(0, room))
        unused_above += max(0, limit.reserve - held)
    return allowed


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
) -> list[tuple[int, int]]:
    """Return ``(queue_index, how_many)`` pairs to try, in order, for ``slots`` free workers.

    Strict offers every slot to each non-empty queue in priority order (the caller stops when
    full). Weighted splits the slots among non-empty queues by weighted draws. ``allowed``
    (from ``allowances``) caps each queue; a queue allowed nothing is not offered any.
    """
    caps = list(allowed) if allowed is not None else [slots] * len(weights)
    candidates = [i for i in range(len(weights)) if i not in empty and caps[i] > 0]
    if slots <= 0 or not candidates:
        return []
    if scheduling == "strict":
        return [(index, min(slots, caps[index])) for index in candidates]
    counts: Counter[int] = Counter()
    while slots > 0 and candidates:
        draws = rng.choices(candidates, weights=[weights[i] for i in candidates], k=slots)
        for index in draws:
            if counts[index] < caps[index]:
                counts[index] += 1
                slots -= 1
        candidates = [i for i in candidates if counts[i] < caps[i]]
    return sorted(counts.items())


def share_by_weight(
    available: Sequence[int], weights: Sequence[int], slots: int, rng: random.Random
) -> list[int]:
    """How many of each queue's ``available`` messages to keep for ``slots`` free workers,
    drawn by weight as ``plan`` draws (a queue with nothing left gives its draws away).

    The weighted wake-up path uses it: when one wait brought back more messages than free
    slots, the kept ones follow the weights too; keeping the highest priorities there was a
    small bias toward high at every wake from idle."""
    kept = [0] * len(available)
    slots = min(slots, sum(available))
    while slots > 0:
        empty = frozenset(i for i, n in enumerate(available) if kept[i] >= n)
        for index, count in plan("weighted", weights, slots, empty, rng):
            take = min(count, available[index] - kept[index])
            kept[index] += take
            slots -= take
    return kept
