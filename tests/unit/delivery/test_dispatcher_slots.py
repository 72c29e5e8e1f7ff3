"""The dispatcher with slot costs under a steady stream of light tasks, as
properties: never more slots at the app than ``concurrency``, no receive asking past the rule
(a lower queue never inside a higher queue's unused reserve), and a due heavy queue served
within ``max_wait_s`` plus the longest running task.

A step-driven simulation, as ``test_long_task_properties``: at each step the tasks that ended
free their slots, the light queue is topped up (a backlog that never ends), and the dispatcher
takes for the free slots. The in-memory driver answers at once and checks every receive
against the rule written out again here, independently of ``scheduler.allowances``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from priority_pubsub.core.message import Lease, Message
from priority_pubsub.delivery.dispatcher import Dispatcher
from priority_pubsub.delivery.settler import Settler
from priority_pubsub.settings.config import Settings, validate_config
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver

STEPS = 80


@dataclass
class World:
    names: list[str]
    slots: list[int]
    reserves: list[int]
    concurrency: int
    now: float = 0.0
    queues: dict[str, deque[str]] = field(default_factory=dict)
    running: list[tuple[float, int]] = field(default_factory=list)  # (ends, queue)
    in_take: list[int] = field(default_factory=list)
    starts: dict[str, list[float]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    serial: int = 0

    def busy(self) -> list[int]:
        counts = [0] * len(self.names)
        for _, queue in self.running:
            counts[queue] += 1
        return counts

    def in_use(self) -> int:
        return sum(self.slots[queue] for _, queue in self.running)


class SimDriver:
    name = "sim"
    dead_letter_enabled = False
    releases_count_as_attempts = False

    def __init__(self, world: World) -> None:
        self.world = world

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        world = self.world
        index = world.names.index(queue)
        busy = [b + t for b, t in zip(world.busy(), world.in_take, strict=True)]
        free = (world.concurrency - world.in_use()
                - sum(n * k for n, k in zip(world.in_take, world.slots, strict=True)))
        unused_above = sum(max(0, world.reserves[k] - busy[k]) * world.slots[k]
                           for k in range(index))
        if max_messages * world.slots[index] > free - unused_above:
            world.violations.append(f"{world.now}: asked {queue} for {max_messages} with "
                                    f"{free} free, {unused_above} reserved above")
        taken = []
        while world.queues[queue] and len(taken) < max_messages:
            taken.append(world.queues[queue].popleft())
        world.in_take[index] += len(taken)
        return [Message(i, queue, index, b"", {}, 1, 0, Lease(None, 0)) for i in taken]

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        self.world.violations.append(f"handed back {message.id}: the rule made a surplus")


def simulate(settings_: Settings, lengths: dict[str, int], seed: int) -> tuple[World, Metrics]:
    queues = settings_.queues
    world = World([q.name for q in queues], [q.slots for q in queues],
                  [q.reserve for q in queues], settings_.concurrency)
    world.queues = {q.name: deque() for q in queues}
    world.starts = {q.name: [] for q in queues}
    driver = SimDriver(world)
    metrics = Metrics()
    observer = DeliveryObserver(metrics, None, driver_type="sim")
    settler = Settler(settings_, driver, observer)  # type: ignore[arg-type]
    dispatcher = Dispatcher(settings_, driver, observer, settler,  # type: ignore[arg-type]
                            rng=random.Random(seed), idle_wait_s=1e-6, clock=lambda: world.now)
    rng = random.Random(seed)

    async def run() -> None:
        for step in range(STEPS):
            world.now = float(step)
            world.running = [task for task in world.running if task[0] > world.now]
            for name in world.names:  # every queue keeps a backlog
                while len(world.queues[name]) < 20:
                    world.serial += 1
                    world.queues[name].append(f"{name}-{world.serial}")
            for _ in range(world.concurrency + 1):
                free = world.concurrency - world.in_use()
                if free <= 0:
                    break
                world.in_take = [0] * len(world.names)
                got = await dispatcher.take(free, busy=world.busy(),
                                            slot_freed=asyncio.Event())
                for message in got:
                    index = world.names.index(message.queue)
                    if message.slots != world.slots[index]:
                        world.violations.append(f"{message.id} carries {message.slots} slots")
                    length = rng.randint(1, lengths[message.queue])
                    world.running.append((world.now + length, index))
                    world.starts[message.queue].append(world.now)
                if world.in_use() > world.concurrency:
                    world.violations.append(f"{world.now}: {world.in_use()} slots in use, "
                                            f"concurrency {world.concurrency}")
                if not got:
                    break

    asyncio.run(run())
    return world, metrics


setups = st.tuples(
    st.integers(3, 8),  # concurrency
    st.integers(2, 3),  # heavy's slots
    st.integers(0, 1),  # light's reserve
    st.booleans(),  # heavy above light
    st.sampled_from(["strict", "weighted"]),
).filter(lambda s: s[1] <= s[0] - s[2] and s[1] < s[0])


def heavy_and_light(concurrency: int, slots: int, reserve: int, heavy_first: bool,
                    scheduling: str, max_wait_s: int) -> Settings:
    heavy = {"name": "heavy", "slots": slots, "max_wait_s": max_wait_s}
    light = {"name": "light", "reserve": reserve if not heavy_first else 0}
    queues = [heavy, light] if heavy_first else [light, heavy]
    return validate_config({"queues": queues, "concurrency": concurrency,
                            "scheduling": scheduling})


@settings(max_examples=80, deadline=None)
@given(setup=setups, seed=st.integers(0, 2**32 - 1), max_wait_s=st.integers(2, 12),
       longest=st.integers(1, 10))
def test_a_due_heavy_queue_is_served_within_its_bound_plus_the_longest_task(
    setup: tuple[int, int, int, bool, str], seed: int, max_wait_s: int, longest: int,
) -> None:
    """Light tasks always wait (a backlog topped up every step) and take every slot that
    frees: the heavy queue, which needs ``slots`` at once, still starts a message at least
    once per ``max_wait_s`` + the longest task (+ one step: the simulation's clock)."""
    concurrency, slots, reserve, heavy_first, scheduling = setup
    settings_ = heavy_and_light(concurrency, slots, reserve, heavy_first, scheduling, max_wait_s)
    world, _ = simulate(settings_, {"heavy": longest, "light": longest}, seed)
    assert world.violations == []
    starts = [0.0, *world.starts["heavy"], float(STEPS - 1)]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert max(gaps) <= max_wait_s + longest + 1, (world.starts["heavy"], gaps)
    if not heavy_first:
        assert world.starts["light"]  # and the light queue above it takes the rest


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_wait_s=st.integers(2, 6))
def test_the_slots_held_for_a_heavy_queue_are_counted(seed: int, max_wait_s: int) -> None:
    """Heavy below light under strict priority gets slots only by the bound: the time they
    were held shows in ``priority_pubsub_slots_held_seconds_total``."""
    settings_ = heavy_and_light(4, 2, 0, False, "strict", max_wait_s)
    world, metrics = simulate(settings_, {"heavy": 3, "light": 5}, seed)
    assert world.violations == []
    assert world.starts["heavy"]
    held = metrics.slots_held.labels("heavy")._value.get()
    assert 0 < held <= STEPS
