"""The Redis driver's promote of a waiting entry (``move_waiting``), one
script: the copy added to the higher stream with ``promoted_from`` and the entry deleted,
only while the group has not taken it (then nothing happens: never in both streams), and
only where the group is the stream's only one (``NotAddressable``)."""

from __future__ import annotations

import json

import pytest

from priority_pubsub.delivery.requeue import CannotPromote, promote_one
from priority_pubsub.drivers.base import PROMOTED_FROM, NotAddressable
from tests.drivers.test_redis import Streams, streams

__all__ = ["streams"]  # the fixture, shared with the driver's own tests

pytestmark = pytest.mark.redis


async def test_an_untaken_entry_moves_up_in_one_step(streams: Streams) -> None:
    high, low = streams.name("high"), streams.name("low")
    driver = await streams.driver((high, low), None)
    first = await streams.dapr_publish(low, b"first", {"k": "v"})
    chosen = await streams.dapr_publish(low, b"chosen", {"k": "v"})
    copy = await promote_one(driver, low, chosen, high)
    assert [i.decode() for i, _ in await streams.raw.xrange(low)] == [first]
    [(copy_id, fields)] = await streams.raw.xrange(high)
    assert copy_id.decode() == copy
    assert fields[b"data"] == b"chosen"
    assert json.loads(fields[b"metadata"]) == {"k": "v", PROMOTED_FROM: low}
    [taken] = await driver.receive(high, 1, 0)
    assert taken.body == b"chosen"


async def test_an_entry_the_group_took_is_left_alone(streams: Streams) -> None:
    high, low = streams.name("high"), streams.name("low")
    driver = await streams.driver((high, low), None)
    entry = await streams.dapr_publish(low, b"taken")
    [received] = await driver.receive(low, 1, 0)  # a worker has it now
    assert received.id == entry
    with pytest.raises(CannotPromote, match="not waiting"):
        await promote_one(driver, low, entry, high)
    assert await streams.raw.xlen(high) == 0
    assert await driver.move_waiting(low, "0-1", high, {}) is None  # gone: nothing either


async def test_a_second_group_on_the_stream_refuses_the_move(streams: Streams) -> None:
    high, low = streams.name("high"), streams.name("low")
    driver = await streams.driver((high, low), None)
    entry = await streams.dapr_publish(low, b"shared")
    await streams.raw.xgroup_create(low, "another-reader", id="0")
    with pytest.raises(NotAddressable, match="another consumer group"):
        await driver.move_waiting(low, entry, high, {PROMOTED_FROM: low})
    assert await streams.raw.xlen(low) == 1
    assert await streams.raw.xlen(high) == 0
