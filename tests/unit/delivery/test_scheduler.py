"""The scheduler is a pure function: replayable with a seeded rng, checked by properties."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from priority_pubsub.delivery.scheduler import plan


def test_strict_offers_all_slots_in_priority_order_skipping_empties() -> None:
    rng = random.Random(1)
    assert plan("strict", [6, 3, 1], 4, frozenset(), rng) == [(0, 4), (1, 4), (2, 4)]
    assert plan("strict", [6, 3, 1], 4, frozenset({0}), rng) == [(1, 4), (2, 4)]
    assert plan("strict", [6, 3, 1], 4, frozenset({0, 1, 2}), rng) == []


def test_weighted_shares_converge_to_weights() -> None:
    rng = random.Random(42)
    served: Counter[int] = Counter()
    for _ in range(20_000):
        for index, count in plan("weighted", [6, 3, 1], 1, frozenset(), rng):
            served[index] += count
    total = sum(served.values())
    assert abs(served[0] / total - 0.6) < 0.02
    assert abs(served[1] / total - 0.3) < 0.02
    assert abs(served[2] / total - 0.1) < 0.02


def test_weighted_gives_empty_queues_share_away() -> None:
    rng = random.Random(3)
    picks = plan("weighted", [6, 3, 1], 100, frozenset({0}), rng)
    assert {index for index, _ in picks} <= {1, 2}
    assert sum(count for _, count in picks) == 100


def test_same_seed_same_decisions() -> None:
    first = [plan("weighted", [5, 1], 3, frozenset(), random.Random(9)) for _ in range(3)]
    assert first[0] == first[1] == first[2]


@given(
    weights=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    slots=st.integers(0, 64),
    seed=st.integers(0, 2**32),
    data=st.data(),
)
def test_plans_never_exceed_slots_nor_name_empty_queues(
    weights: list[int], slots: int, seed: int, data: st.DataObject
) -> None:
    empty = frozenset(data.draw(st.sets(st.integers(0, len(weights) - 1))))
    for scheduling in ("strict", "weighted"):
        picks = plan(scheduling, weights, slots, empty, random.Random(seed))  # type: ignore[arg-type]
        assert all(index not in empty and 0 <= index < len(weights) for index, _ in picks)
        assert all(count >= 1 for _, count in picks)
        if scheduling == "weighted":
            assert sum(count for _, count in picks) == (slots if len(empty) < len(weights) else 0)
        else:
            assert [index for index, _ in picks] == sorted(
                i for i in range(len(weights)) if i not in empty
            ) or slots == 0
