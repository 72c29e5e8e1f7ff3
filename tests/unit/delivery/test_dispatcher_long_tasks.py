"""Scheduler and dispatcher under random arrivals and task lengths, as properties of the
capacity rule: no queue above its limit, no lower queue inside a higher queue's
unused reserve, a starved queue tried within ``max_wait_s`` and one pick, no receive asking
for more than the rule allows at that moment, nothing lost.

The reserve is checked where the rule applies it, at each receive: a lower queue asks only
while ``free > U(j)``. (A higher queue may later take the last worker, a reserved one of a
queue between them included: reserves keep lower queues out, never higher ones.)

A step-driven simulation: at each step the tasks that ended free their workers, new messages
arrive, and the dispatcher takes for the free workers (the receiver's part: what is at the
app per queue, and the clock, are passed in). The in-memory driver answers at once and checks
every receive against the rule, written out again here, independently of ``allowances``.
"""

from __future__ import annotations

import asyncio
import math
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

NAMES = ("hi", "mid", "lo")
LOW = 2


def room(reserves: list[int], limits: list[int | None], busy: list[int], free: int,
         queue: int) -> int:
    """How many ``queue`` may take now: the capacity rule, spelled out."""
    unused_above = sum(max(0, reserves[k] - busy[k]) for k in range(queue))
    own = math.inf if limits[queue] is None else limits[queue] - busy[queue]  # type: ignore[operator]
    return int(max(0, min(free - unused_above, own)))


@dataclass
class World:
    """The broker's queues and the app's workers, as the simulation sees them."""

    reserves: list[int]
    limits: list[int | None]
    concurrency: int
    now: float = 0.0
    queues: dict[str, deque[str]] = field(default_factory=dict)
    running: list[tuple[float, int, str]] = field(default_factory=list)  # (ends, queue, id)
    in_take: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Received by the take under way (sweeps and promotions; not yet at the app)."""
    woken: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Received by the take's waits: in hand but not yet chosen."""
    lo_tried_at: float = 0.0
    started: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def busy(self) -> list[int]:
        counts = [0, 0, 0]
        for _, queue, _ in self.running:
            counts[queue] += 1
        return counts

    def free(self) -> int:
        return self.concurrency - len(self.running)


class SimDriver:
    name = "sim"
    dead_letter_enabled = False

    def __init__(self, world: World) -> None:
        self.world = world

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        world, index = self.world, NAMES.index(queue)
        busy = [b + t for b, t in zip(world.busy(), world.in_take, strict=True)]
        allowed = room(world.reserves, world.limits, busy, world.free() - sum(world.in_take),
                       index)
        if max_messages > allowed:
            world.violations.append(f"asked {queue} for {max_messages}, rule allows {allowed}")
        if index == LOW:
            world.lo_tried_at = world.now
        taken = []
        while world.queues[queue] and len(taken) < max_messages:
            taken.append(world.queues[queue].popleft())
        (world.woken if wait_s else world.in_take)[index] += len(taken)
        return [Message(i, queue, index, b"", {}, 1, 0, Lease(None, 0)) for i in taken]

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        self.world.released.append(message.id)
        self.world.queues[message.queue].appendleft(message.id)


queue_setups = st.tuples(
    st.integers(2, 6),  # concurrency
    st.integers(0, 2), st.integers(0, 2),  # reserves of hi and mid
    st.sampled_from([None, 1, 2, 3]), st.sampled_from([None, 1, 2, 4]),
    st.sampled_from([None, 2, 4, 6]),  # limits of hi, mid, lo
).filter(lambda s: s[1] + s[2] < s[0]
         and (s[3] is None or s[3] >= s[1]) and (s[4] is None or s[4] >= s[2]))
arrivals = st.lists(st.tuples(st.integers(0, 39), st.integers(0, 2), st.integers(1, 8)),
                    max_size=60)


def sidecar_settings(setup: tuple[int, int, int, int | None, int | None, int | None],
                     scheduling: str, max_wait_s: int) -> Settings:
    concurrency, r_hi, r_mid, l_hi, l_mid, l_lo = setup
    queues = [
        {"name": "hi", "reserve": r_hi, "max_concurrency": l_hi, "weight": 5},
        {"name": "mid", "reserve": r_mid, "max_concurrency": l_mid, "weight": 3},
        {"name": "lo", "max_concurrency": l_lo, "max_wait_s": max_wait_s},
    ]
    return validate_config({"queues": queues, "concurrency": concurrency,
                            "scheduling": scheduling})


def simulate(settings_: Settings, plan: list[tuple[int, int, int]], seed: int,
             max_wait_s: int) -> World:
    limits = [q.max_concurrency for q in settings_.queues]
    world = World([q.reserve for q in settings_.queues], limits, settings_.concurrency)
    world.queues = {n: deque() for n in NAMES}
    driver = SimDriver(world)
    observer = DeliveryObserver(Metrics(), None, driver_type="sim")
    settler = Settler(settings_, driver, observer)  # type: ignore[arg-type]
    dispatcher = Dispatcher(settings_, driver, observer, settler,  # type: ignore[arg-type]
                            rng=random.Random(seed), idle_wait_s=1e-6, clock=lambda: world.now)
    lengths = {f"{NAMES[q]}-{n}": length for n, (_, q, length) in enumerate(plan)}

    async def run() -> None:
        for step in range(60):
            world.now = float(step)
            world.running = [task for task in world.running if task[0] > world.now]
            for n, (at, queue, _) in enumerate(plan):
                if at == step:
                    world.queues[NAMES[queue]].append(f"{NAMES[queue]}-{n}")
            for _ in range(world.concurrency + 1):  # takes until nothing more comes
                if world.free() <= 0:
                    break
                if not await take_once(world, dispatcher, lengths, max_wait_s):
                    break

    asyncio.run(run())
    return world


async def take_once(world: World, dispatcher: Dispatcher, lengths: dict[str, int],
                    max_wait_s: int) -> bool:
    busy, free = world.busy(), world.free()
    lo_overdue = (world.now - world.lo_tried_at >= max_wait_s
                  and room(world.reserves, world.limits, busy, free, LOW) > 0)
    world.in_take, world.woken = [0, 0, 0], [0, 0, 0]
    tried_before = world.lo_tried_at
    got = await dispatcher.take(free, busy=busy, slot_freed=asyncio.Event())
    if lo_overdue and world.lo_tried_at == tried_before:
        world.violations.append(f"lo untried since {tried_before} at {world.now}")
    kept = [0, 0, 0]
    for message in got:
        world.running.append((world.now + lengths[message.id], message.priority, message.id))
        kept[message.priority] += 1
        world.started.append(message.id)
    busy = world.busy()
    for queue in range(3):
        limit = world.limits[queue]
        if limit is not None and busy[queue] > limit:
            world.violations.append(f"{NAMES[queue]} holds {busy[queue]} > {limit}")
    if sum(busy) > world.concurrency:
        world.violations.append(f"{sum(busy)} at the app, concurrency {world.concurrency}")
    return bool(got)


@settings(max_examples=120, deadline=None)
@given(setup=queue_setups, plan=arrivals, seed=st.integers(0, 2**32 - 1),
       scheduling=st.sampled_from(["strict", "weighted"]), max_wait_s=st.integers(2, 10))
def test_the_rule_holds_over_random_arrivals_and_task_lengths(
    setup: tuple[int, int, int, int | None, int | None, int | None],
    plan: list[tuple[int, int, int]], seed: int, scheduling: str, max_wait_s: int,
) -> None:
    world = simulate(sidecar_settings(setup, scheduling, max_wait_s), plan, seed, max_wait_s)
    assert world.violations == []
    # nothing lost, nothing twice: every message started once or is still in its queue
    seen = world.started + [m for q in world.queues.values() for m in q]
    assert sorted(seen) == sorted(f"{NAMES[q]}-{n}" for n, (_, q, _) in enumerate(plan))


@settings(max_examples=60, deadline=None)
@given(setup=queue_setups, seed=st.integers(0, 2**32 - 1), max_wait_s=st.integers(2, 10))
def test_a_starved_low_queue_is_served_under_continuous_high_load(
    setup: tuple[int, int, int, int | None, int | None, int | None], seed: int,
    max_wait_s: int,
) -> None:
    """hi always has work (two arrivals a step, tasks of 3 steps): lo is served once per
    ``max_wait_s`` at least, whenever the rule lets it take a worker."""
    plan = [(step, 0, 3) for step in range(40) for _ in range(2)] + [(0, LOW, 1)] * 10
    world = simulate(sidecar_settings(setup, "strict", max_wait_s), plan, seed, max_wait_s)
    assert world.violations == []
