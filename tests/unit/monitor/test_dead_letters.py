"""The monitor's dead-letter desk where the broker cannot list its dead-letter queue (SQS,
Pub/Sub): it shows this replica's own record, says so, and refuses to act on it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from priority_pubsub.core.message import DeadLetter
from priority_pubsub.monitor.dead_letters import (
    ActionUnavailable,
    DeadLetterDesk,
    DeadLetterFilter,
)


class ReceiveOnlyDriver:
    """No ``browse``/``receive_ids``: not a ``DeadLetterBrowser``."""

    name = "receive-only"


def letter(message_id: str, source: str, reason: str) -> DeadLetter:
    return DeadLetter(id=message_id, source=source, reason=reason, attempts=3,
                      first_seen_ms=1, last_seen_ms=2)


def desk(recorded: list[DeadLetter]) -> DeadLetterDesk:
    return DeadLetterDesk(ReceiveOnlyDriver(), "dead", ("high", "low"),  # type: ignore[arg-type]
                          lambda: recorded)


async def test_lists_this_replicas_record_newest_first_and_filters_it() -> None:
    recorded = [letter("a1", "high", "app returned fatal status 400"),
                letter("b2", "low", "Timeout after 30s"),
                letter("c3", "low", "app returned fatal status 422")]
    found = await desk(recorded).listing(DeadLetterFilter())
    assert found.source == "replica"
    assert [d.id for d in found.letters] == ["c3", "b2", "a1"]
    by_reason = await desk(recorded).listing(DeadLetterFilter(reason="FATAL", queue="low"))
    assert [d.id for d in by_reason.letters] == ["c3"]
    by_id = await desk(recorded).listing(DeadLetterFilter(id="b"))
    assert [d.id for d in by_id.letters] == ["b2"]


async def test_requeue_and_delete_are_refused_with_the_command_to_use() -> None:
    chosen = desk([letter("a1", "high", "x")])
    assert not chosen.browsable
    with pytest.raises(ActionUnavailable, match="priority-pubsub requeue"):
        await chosen.requeue(["a1"])
    with pytest.raises(ActionUnavailable):
        await chosen.delete(["a1"])


class HoldingBrowser:
    """RabbitMQ's way: a browse holds what it read (unacked on its channel) until it ends,
    and a ``receive_ids`` meanwhile does not find those."""

    name = "holding"

    def __init__(self, ids: list[str]) -> None:
        self.waiting = list(ids)
        self.held: set[str] = set()

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        got = self.waiting[:limit]
        self.held.update(got)
        await asyncio.sleep(0.05)  # its channel still open
        self.held.difference_update(got)
        return [letter(i, "low", "x") for i in got]

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[SimpleNamespace]:
        return [SimpleNamespace(id=i) for i in ids if i in self.waiting and i not in self.held]

    async def ack(self, message: SimpleNamespace) -> None:
        self.waiting.remove(message.id)

    async def publish(self, queue: str, body: bytes, attributes: object = None,
                      content_type: str | None = None) -> str:
        raise AssertionError("not published here")


async def test_an_action_waits_for_a_browse_under_way_and_takes_every_chosen_letter() -> None:
    broker = HoldingBrowser(["a1", "b2"])
    chosen = DeadLetterDesk(broker, "dead", ("low",), list)  # type: ignore[arg-type]
    assert chosen.actionable
    listing = asyncio.ensure_future(chosen.listing(DeadLetterFilter()))
    await asyncio.sleep(0)  # the page's refresh is browsing
    assert broker.held == {"a1", "b2"}
    assert await chosen.delete(["a1", "b2"]) == 2
    assert [d.id for d in (await listing).letters] == ["a1", "b2"]  # read before the delete
    assert broker.waiting == []
    assert (await chosen.listing(DeadLetterFilter())).letters == []  # read afresh
