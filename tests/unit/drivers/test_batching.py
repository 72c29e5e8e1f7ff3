"""MicroBatcher: alone means at once, grouping only while a call is in flight, each entry's
failure its own."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from priority_pubsub.core.errors import DriverUnavailable, LeaseLost
from priority_pubsub.drivers.batching import MicroBatcher


class Broker:
    """Records each call; a call returns when the test opens its gate."""

    def __init__(self, stale: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.stale = stale
        self.broken = False

    async def send(self, key: str, entries: Sequence[str]) -> list[BaseException | None]:
        self.calls.append((key, list(entries)))
        await self.gate.wait()
        if self.broken:
            raise DriverUnavailable("broker down")
        return [LeaseLost(e) if e in self.stale else None for e in entries]


async def one_call_in_flight(
    broker: Broker | None = None,
) -> tuple[Broker, MicroBatcher[str, str], asyncio.Task[None]]:
    """A batcher whose first settle ("a") is in flight, held at the broker's closed gate."""
    broker = broker or Broker()
    broker.gate.clear()
    batcher: MicroBatcher[str, str] = MicroBatcher(broker.send, 10)
    first = asyncio.create_task(batcher.submit("q", "a"))
    await asyncio.sleep(0.01)
    return broker, batcher, first


async def test_a_lone_settle_is_sent_at_once() -> None:
    broker = Broker()
    batcher = MicroBatcher(broker.send, 10)
    await asyncio.wait_for(batcher.submit("q", "a"), 1)
    await asyncio.wait_for(batcher.submit("q", "b"), 1)
    assert broker.calls == [("q", ["a"]), ("q", ["b"])]  # sequential settles: never grouped


async def test_settles_arriving_during_a_call_go_together_after_it() -> None:
    broker, batcher, first = await one_call_in_flight()
    assert broker.calls == [("q", ["a"])]  # sent before anything else arrived
    rest = [asyncio.create_task(batcher.submit("q", x)) for x in "bcd"]
    other = asyncio.create_task(batcher.submit("other", "z"))  # another key is not held
    await asyncio.sleep(0.01)
    assert broker.calls == [("q", ["a"]), ("other", ["z"])]
    broker.gate.set()
    await asyncio.wait_for(asyncio.gather(first, other, *rest), 1)
    assert broker.calls[2:] == [("q", ["b", "c", "d"])]
    assert batcher.calls == 3
    assert batcher.entries == 5


async def test_a_full_batch_goes_at_once_without_waiting_for_the_call_in_flight() -> None:
    broker = Broker()
    broker.gate.clear()
    batcher = MicroBatcher(broker.send, 3)
    tasks = [asyncio.create_task(batcher.submit("q", str(i))) for i in range(7)]
    await asyncio.sleep(0.01)
    # "0" alone at once, then each time three wait: sent without waiting for the gate
    assert [entries for _, entries in broker.calls] == [["0"], ["1", "2", "3"], ["4", "5", "6"]]
    broker.gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 1)


async def test_a_partial_failure_fails_only_its_own_entry() -> None:
    broker, batcher, first = await one_call_in_flight(Broker(stale=frozenset({"b"})))
    grouped = [asyncio.create_task(batcher.submit("q", x)) for x in "bc"]
    broker.gate.set()
    results = await asyncio.wait_for(
        asyncio.gather(first, *grouped, return_exceptions=True), 1
    )
    assert results[0] is None
    assert results[2] is None
    assert isinstance(results[1], LeaseLost)
    assert broker.calls == [("q", ["a"]), ("q", ["b", "c"])]  # each sent once, none twice


async def test_a_failed_call_fails_its_batch_and_not_the_next() -> None:
    broker, batcher, first = await one_call_in_flight()
    broker.broken = True
    second = asyncio.create_task(batcher.submit("q", "b"))
    await asyncio.sleep(0.01)
    broker.gate.set()
    with pytest.raises(DriverUnavailable):
        await asyncio.wait_for(first, 1)
    with pytest.raises(DriverUnavailable):  # "b" was sent after: the broker is still down
        await asyncio.wait_for(second, 1)
    broker.broken = False
    await asyncio.wait_for(batcher.submit("q", "c"), 1)
    assert broker.calls == [("q", ["a"]), ("q", ["b"]), ("q", ["c"])]


async def test_a_cancelled_caller_still_has_its_settle_sent() -> None:
    broker, batcher, first = await one_call_in_flight()
    waiting = asyncio.create_task(batcher.submit("q", "b"))
    await asyncio.sleep(0.01)
    waiting.cancel()
    broker.gate.set()
    await asyncio.wait_for(first, 1)
    await asyncio.wait_for(batcher.drain(), 1)
    assert broker.calls == [("q", ["a"]), ("q", ["b"])]
