"""The monitor's dead-letter desk where the broker cannot list its dead-letter queue (SQS,
Pub/Sub): it shows this replica's own record, says so, and refuses to act on it."""

from __future__ import annotations

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
