"""``queues[].slots`` in the config: what ``check`` and ``run`` refuse, in
one line naming the queues; the capacity plan ``check`` and ``stats`` print in slots; Dapr
mode's per-topic ``slots`` as its ``reserve`` comes."""

from __future__ import annotations

from pathlib import Path

import pytest

from priority_pubsub.commands.capacity_plan import capacity_plan, plan_lines
from priority_pubsub.core.errors import ConfigError
from priority_pubsub.settings.config import validate_config
from tests.unit.dapr.test_plan import COMPONENT, plan_for


def config(queues: list[dict[str, object]], concurrency: int = 4) -> dict[str, object]:
    return {"queues": queues, "concurrency": concurrency}


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([{"name": "heavy", "slots": 5}, {"name": "huge", "slots": 6}, {"name": "lo"}],
         r"^config: queues: slots \(heavy 5, huge 6\) above concurrency 4$"),
        ([{"name": "heavy", "reserve": 1, "slots": 2}, {"name": "mid", "reserve": 2},
          {"name": "lo"}],
         r"^config: queues: reserves \(heavy 1 x 2 slots, mid 2\) must sum below "
         r"concurrency 4$"),
        ([{"name": "heavy", "reserve": 2, "slots": 2}, {"name": "lo"}],
         r"^config: queues: reserves \(heavy 2 x 2 slots\) must sum below concurrency 4$"),
        ([{"name": "hi", "reserve": 2}, {"name": "heavy", "slots": 3}],
         r"^config: queues: 'heavy' needs 3 slots, but the reserves above it leave 2 of "
         r"concurrency 4$"),
        ([{"name": "heavy", "slots": 0}, {"name": "lo"}], r"^queues\.0\.slots: "),
    ],
)
def test_slot_settings_that_cannot_work_are_one_line_naming_the_queues(
    queues: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        validate_config(config(queues))
    assert "\n" not in str(caught.value)


def test_slots_at_concurrency_and_reserves_below_it_load() -> None:
    settings = validate_config(config([{"name": "all", "slots": 5},
                                       {"name": "hi", "reserve": 1, "slots": 3},
                                       {"name": "two", "slots": 2}, {"name": "lo"}], 5))
    assert [q.slots for q in settings.queues] == [5, 3, 2, 1]


def test_the_capacity_plan_counts_slots() -> None:
    settings = validate_config(config([
        {"name": "hi", "reserve": 1},
        {"name": "heavy", "slots": 2, "reserve": 1, "max_concurrency": 1},
        {"name": "lo", "max_wait_s": 600},
    ], 6))
    plan = capacity_plan(settings)
    assert [(p["queue"], p["most_workers"], p["most_messages"], p["kept_for_higher"])
            for p in plan] == [("hi", 6, 6, 0), ("heavy", 2, 1, 1), ("lo", 3, 3, 3)]
    assert plan_lines(settings) == [
        "capacity plan: concurrency 6 slots (strict)",
        "  hi: up to 6 slots (1 reserved for it)",
        "  heavy: up to 2 slots = 1 messages (2 slots per message; 2 reserved for it "
        "(1 messages); 1 kept for higher queues; max_concurrency 1)",
        "  lo: up to 3 slots (3 kept for higher queues; served at least once per 600 s)",
    ]


def test_a_topic_gets_slots_as_it_gets_its_reserve(tmp_path: Path) -> None:
    """Dapr mode: ``slots`` from a Subscription's metadata or a ``dapr.priorities`` entry
    (which wins) becomes the topic's queue's ``slots``."""
    app = [{"pubsubname": "orderpubsub", "topic": t, "route": "/o", "metadata": m}
           for t, m in (("render", {"slots": "3"}), ("thumbs", {"slots": "2"}),
                        ("orders", {}))]
    plan = plan_for(tmp_path, COMPONENT, app=app,
                    priorities=["orders", {"topic": "thumbs", "slots": 1}])
    settings = validate_config(plan.settings())
    assert [(q.name, q.slots) for q in settings.queues] == [
        ("shop-orders", 1), ("shop-thumbs", 1), ("shop-render", 3)]
    bad = [{"pubsubname": "orderpubsub", "topic": "a", "route": "/o",
            "metadata": {"slots": "two"}}]
    with pytest.raises(ConfigError, match=r"metadata\.slots: not an integer: 'two'$"):
        plan_for(tmp_path, COMPONENT, app=bad)
