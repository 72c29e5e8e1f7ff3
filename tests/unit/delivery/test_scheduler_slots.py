"""The capacity rule with slot costs, pure: ``concurrency`` counts slots, a
message of a ``slots: k`` queue occupies k of them, a reserve holds ``reserve x slots``, and a
due heavy queue has the free slots held for it (``short_of_slots``, ``holding``).

Table-driven examples first, then properties over random limits, busy counts and take
orders: never more slots taken than are free, no lower queue inside a higher queue's unused
reserve, the answers only shrink as a take goes on (no receive ever hands back), and a hold
only lets its own queue's room grow.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from priority_pubsub.delivery.scheduler import (
    QueueLimits,
    allowances,
    plan,
    share_by_weight,
    short_of_slots,
    unused_reserves,
)

HEAVY = QueueLimits(slots=2)
LIGHT = QueueLimits()


@pytest.mark.parametrize(
    ("limits", "busy", "free", "expected"),
    [
        # [{heavy, slots 2}, {light}] at concurrency 4
        ((HEAVY, LIGHT), (0, 0), 4, [2, 4]),
        ((HEAVY, LIGHT), (0, 3), 1, [0, 1]),  # one slot free: no heavy message fits
        ((HEAVY, LIGHT), (1, 0), 2, [1, 2]),
        ((HEAVY, LIGHT), (1, 1), 1, [0, 1]),
        ((HEAVY, LIGHT), (2, 0), 0, [0, 0]),
        # a heavy reserve keeps reserve x slots: light may use 4 - 2 while heavy is idle
        ((QueueLimits(reserve=1, slots=2), LIGHT), (0, 0), 4, [2, 2]),
        ((QueueLimits(reserve=1, slots=2), LIGHT), (0, 2), 2, [1, 0]),
        ((QueueLimits(reserve=1, slots=2), LIGHT), (1, 1), 1, [0, 1]),  # reserve in use
        # a light reserve above a heavy queue: the heavy one needs 2 beyond it
        ((QueueLimits(reserve=1), HEAVY), (0, 0), 4, [4, 1]),
        ((QueueLimits(reserve=1), HEAVY), (0, 1), 2, [2, 0]),
        # max_concurrency stays a count of messages
        ((QueueLimits(max_concurrency=1, slots=3), LIGHT), (0, 0), 6, [1, 6]),
        ((QueueLimits(max_concurrency=1, slots=3), LIGHT), (1, 0), 3, [0, 3]),
        # slots 1 everywhere: the capacity rule without slots
        ((QueueLimits(reserve=1), LIGHT), (0, 2), 2, [2, 1]),
    ],
)
def test_allowances_count_slots(limits: tuple[QueueLimits, ...], busy: tuple[int, ...],
                                free: int, expected: list[int]) -> None:
    assert allowances(limits, busy, free) == expected


@pytest.mark.parametrize(
    ("limits", "busy", "free", "holding", "expected"),
    [
        # light above, heavy below and due with one slot free: the slot is held, light
        # (no reserve) takes nothing until two are free
        ((LIGHT, HEAVY), (3, 0), 1, 1, [0, 0]),
        ((LIGHT, HEAVY), (2, 0), 2, 1, [0, 1]),
        # a queue above keeps its own unused reserve while the others are held
        ((QueueLimits(reserve=1), LIGHT, HEAVY), (0, 2, 0), 2, 2, [1, 0, 0]),
        ((QueueLimits(reserve=1), LIGHT, HEAVY), (0, 1, 0), 3, 2, [1, 0, 1]),
        # queues below the held one take nothing
        ((HEAVY, LIGHT), (0, 3), 1, 0, [0, 0]),
    ],
)
def test_a_hold_keeps_the_free_slots_for_the_due_queue(
    limits: tuple[QueueLimits, ...], busy: tuple[int, ...], free: int, holding: int,
    expected: list[int],
) -> None:
    assert allowances(limits, busy, free, holding) == expected


def test_short_of_slots_only_for_want_of_free_slots() -> None:
    assert short_of_slots((LIGHT, HEAVY), (3, 0), 1, 4, 1)
    assert not short_of_slots((LIGHT, HEAVY), (2, 0), 2, 4, 1)  # it fits now: no hold
    capped = QueueLimits(max_concurrency=1, slots=2)
    assert not short_of_slots((LIGHT, capped), (1, 1), 1, 4, 1)  # at its own limit
    # an effective concurrency lowered below what it needs beside the reserves above: a
    # hold would idle every slot for good
    assert not short_of_slots((QueueLimits(reserve=1), HEAVY), (0, 1), 1, 2, 1)
    assert short_of_slots((QueueLimits(reserve=1), HEAVY), (0, 2), 1, 3, 1)


def test_plan_weighs_by_slots_and_offers_only_what_fits() -> None:
    assert plan("strict", [1, 1], 3, frozenset(), random.Random(1),
                costs=[2, 1]) == [(0, 1), (1, 3)]
    assert plan("strict", [1, 1], 1, frozenset(), random.Random(1), costs=[2, 1]) == [(1, 1)]
    for seed in range(50):
        picks = dict(plan("weighted", [1, 1], 5, frozenset(), random.Random(seed),
                          costs=[2, 1]))
        assert 2 * picks.get(0, 0) + picks.get(1, 0) <= 5
        assert 5 - (2 * picks.get(0, 0) + picks.get(1, 0)) < 1 or picks.get(1, 0) == 0


def test_weighted_shares_follow_the_weights_in_slots() -> None:
    """Weights 1:1 between a 2-slot and a 1-slot queue share the slots 1:1, so the light
    queue gets twice the messages (over many free slots: with few, what is left after a
    heavy draw may fit only a light one)."""
    rng = random.Random(7)
    used = [0, 0]
    for _ in range(1000):
        for index, count in plan("weighted", [1, 1], 40, frozenset(), rng, costs=[2, 1]):
            used[index] += count * (2 if index == 0 else 1)
    assert abs(used[0] / sum(used) - 0.5) < 0.03


def test_share_by_weight_keeps_within_the_free_slots() -> None:
    for seed in range(100):
        kept = share_by_weight([3, 3], [1, 1], 4, random.Random(seed), costs=[3, 1])
        assert 3 * kept[0] + kept[1] <= 4
        assert max(kept) <= 3
        assert 3 * kept[0] + kept[1] >= 3  # never leaves a fitting message unkept


limit_sets = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from([None, 1, 2, 3]), st.integers(1, 3)),
    min_size=1, max_size=4,
).map(lambda rows: [QueueLimits(r, None if m is None else max(m, r), k) for r, m, k in rows])


@settings(max_examples=300, deadline=None)
@given(limits=limit_sets, data=st.data())
def test_takes_by_the_rule_never_overfill_nor_enter_a_reserve_nor_grow(
    limits: list[QueueLimits], data: st.DataObject
) -> None:
    """Any order of takes, each only where ``allowances`` says so: the slots taken never
    pass those free; a queue takes only with its slots free beyond the unused reserves above
    it (while held: only within its own reserve, or the held queue); each queue's answer only
    shrinks as the take goes on; and the held queue's room never shrinks but for its own
    takes."""
    capacity = data.draw(st.integers(1, 12))
    busy = [data.draw(st.integers(0, 3)) for _ in limits]
    in_use = sum(b * limit.slots for b, limit in zip(busy, limits, strict=True))
    free = data.draw(st.integers(0, max(0, capacity - in_use)))
    holding = data.draw(st.sampled_from([None, *range(len(limits))]))
    before = allowances(limits, busy, free, holding)
    for _ in range(20):
        takers = [i for i, n in enumerate(before) if n > 0]
        if not takers:
            break
        queue = data.draw(st.sampled_from(takers))
        unused = unused_reserves(limits, busy)
        k = limits[queue].slots
        if holding is None or queue == holding:
            assert free - sum(unused[:queue]) >= k
        else:
            assert queue < holding
            assert min(free, unused[queue]) >= k
        held_room = None if holding is None else free - sum(unused[:holding])
        busy[queue] += 1
        free -= k
        assert free >= 0
        limit = limits[queue].max_concurrency
        assert limit is None or busy[queue] <= limit
        if held_room is not None and queue != holding:
            assert free - sum(unused_reserves(limits, busy)[:holding]) >= held_room
        after = allowances(limits, busy, free, holding)
        assert all(a <= b for a, b in zip(after, before, strict=True)), (before, after)
        before = after
