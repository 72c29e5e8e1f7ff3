"""Which queue a free worker takes from next: a pure function of config, rng and empties.

``strict``: the highest non-empty queue always wins. ``weighted``: each free slot draws a
queue by weight among the queues not known to be empty, so under saturation shares follow
the weights (6/3/1 -> 60/30/10 %) and no queue starves; empty queues give their share away.
Nothing here does I/O or reads a clock, so tests replay decisions exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Literal

Scheduling = Literal["strict", "weighted"]


def plan(
    scheduling: Scheduling,
    weights: Sequence[int],
    slots: int,
    empty: frozenset[int],
    rng: random.Random,
) -> list[tuple[int, int]]:
    """Return ``(queue_index, how_many)`` pairs to try, in order, for ``slots`` free workers.

    Strict offers every slot to each non-empty queue in priority order (the caller stops when
    full). Weighted splits the slots among non-empty queues by weighted draws.
    """
    candidates = [index for index in range(len(weights)) if index not in empty]
    if slots <= 0 or not candidates:
        return []
    if scheduling == "strict":
        return [(index, slots) for index in candidates]
    draws = rng.choices(candidates, weights=[weights[i] for i in candidates], k=slots)
    counts = Counter(draws)
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
