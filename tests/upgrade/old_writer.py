"""Run by ``test_local_upgrade`` under an OLD commit's source tree (PYTHONPATH), never imported
by the current code: it fills a local queue file and a journal the way that release did.

Written against the API of the pinned commit (``OLD_COMMIT`` in the test): it publishes,
then leaves messages in each state a live queue can hold when the sidecar is upgraded —
ready, leased (claimed, lease still running when the writer exits), delayed (a retry with a
delay) and dead-lettered — acks a few, journals every settle, and prints the ids per state
as one JSON line.

Usage: python old_writer.py OUT_DIR LEASE_S DELAY_S
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import priority_pubsub
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local import LocalDriver, LocalOptions
from priority_pubsub.journal import JournalRecord, JournalWriter
from priority_pubsub.message import now_ms

PER_STATE = 4
QUEUES = ("high", "normal", "low")


async def main(out: Path, lease_s: float, delay_s: float) -> None:
    context = DriverContext(queues=QUEUES, dead_letter_queue="dead", lease_duration_s=lease_s)
    driver = LocalDriver(LocalOptions(path=out / "queues.db"), context)
    journal = JournalWriter(out / "journal", rotate_mb=64)
    await driver.start()
    journal.start()
    ids: dict[str, list[str]] = {}

    async def publish(state: str, queue: str, count: int) -> None:
        for n in range(count):
            body = json.dumps({"state": state, "n": n}).encode()
            message_id = await driver.publish(queue, body, {"state": state, "n": str(n)},
                                              "application/json")
            ids.setdefault(state, []).append(message_id)

    async def settle(state: str, outcome: str, act: object) -> None:
        messages = await driver.receive("normal", PER_STATE, 1)
        assert [m.id for m in messages] == ids[state], (state, messages)
        for message in messages:
            await act(message)  # type: ignore[operator]
            if outcome:
                journal.append(JournalRecord(
                    message_id=message.id, queue=message.queue, priority=message.priority,
                    driver="local", attempt=message.attempt, enqueued_ms=message.enqueued_ms,
                    received_ms=message.received_ms, forwarded_ms=message.received_ms,
                    settled_ms=now_ms(), outcome=outcome, http_status=500 if outcome != "ack"
                    else 200, reason=None if outcome == "ack" else f"old {outcome}",
                    bytes=len(message.body)))

    for state in ("acked", "leased", "delayed", "dead"):
        await publish(state, "normal", PER_STATE)
    await settle("acked", "ack", driver.ack)
    await settle("leased", "", lambda m: asyncio.sleep(0))
    await settle("delayed", "retry", lambda m: driver.retry(m, delay_s))
    await settle("dead", "dead", lambda m: driver.dead_letter(m, "old release said no"))
    for queue in QUEUES:
        await publish(f"ready-{queue}", queue, PER_STATE)
    await journal.close()
    await driver.close()
    print(json.dumps({"module": priority_pubsub.__file__, "ids": ids}))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])))
