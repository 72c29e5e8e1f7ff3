"""The local SQLite driver through the conformance suite, plus its own guarantees."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from priority_pubsub.core.errors import MessageTooLarge
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import DEAD_LETTER_REASON, LocalDriver
from priority_pubsub.drivers.local.options import LocalOptions
from tests.drivers.conformance import (
    DeadLetter,
    DeadLetterBrowsing,
    DriverConformance,
    DriverHarness,
    LateBroker,
)

pytestmark = pytest.mark.local
QUEUES = ("high", "normal", "low")


def make_local(path: Path, lease_s: float = 30, **options: object) -> LocalDriver:
    context = DriverContext(queues=QUEUES, dead_letter_queue="dead", lease_duration_s=lease_s)
    return LocalDriver(LocalOptions(path=path, **options), context)  # type: ignore[arg-type]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[DriverHarness]:
    path = tmp_path / "queues.db"
    made: list[LocalDriver] = []
    publisher = make_local(path)
    await publisher.start()

    async def make_driver(lease_s: float) -> LocalDriver:
        driver = make_local(path, lease_s)
        await driver.start()
        made.append(driver)
        return driver

    async def publish(queue: str, body: bytes, attributes: dict[str, str]) -> None:
        await publisher.publish(queue, body, attributes)

    async def dead_letters() -> list[DeadLetter]:
        letters = []
        while batch := await publisher.receive("dead", 10, 0):
            for message in batch:
                letters.append(DeadLetter(
                    message.body, message.attributes, message.attributes.get(DEAD_LETTER_REASON)
                ))
                await publisher.ack(message)
        return letters

    yield DriverHarness(
        queues=QUEUES, dead_letter_queue="dead", make_driver=make_driver, publish=publish,
        dead_letters=dead_letters, lease_s=1.0, settle_s=0.2,
    )
    for driver in made:
        await driver.close()
    await publisher.close()


class TestLocalConformance(DriverConformance, DeadLetterBrowsing):
    pass


async def test_publish_refuses_oversized_body(tmp_path: Path) -> None:
    driver = make_local(tmp_path / "q.db", max_message_bytes=10)
    await driver.start()
    try:
        with pytest.raises(MessageTooLarge, match="max_message_bytes"):
            await driver.publish("high", b"x" * 11)
        assert (await driver.depth("high")).visible == 0
    finally:
        await driver.close()


async def test_messages_survive_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    first = make_local(path, lease_s=1)
    await first.start()
    await first.publish("low", b"durable", {"a": "1"})
    [claimed] = await first.receive("low", 1, 0)
    await first.close()  # closed while holding a lease: the lease must still lapse
    second = make_local(path, lease_s=1)
    await second.start()
    try:
        depth = await second.depth("low")
        assert (depth.visible, depth.in_flight) == (0, 1)
        [again] = await second.receive("low", 1, 5)
        assert (again.body, again.attempt, again.id) == (b"durable", 2, claimed.id)
    finally:
        await second.close()


async def test_claims_in_fifo_order_and_batches(tmp_path: Path) -> None:
    driver = make_local(tmp_path / "q.db")
    await driver.start()
    try:
        for n in range(25):
            await driver.publish("normal", str(n).encode())
        got = await driver.receive("normal", 10, 0)
        assert [m.body for m in got] == [str(n).encode() for n in range(10)]
        depth = await driver.depth("normal")
        assert (depth.visible, depth.in_flight) == (15, 10)
    finally:
        await driver.close()


async def test_waiting_receive_sees_another_process_commit(tmp_path: Path) -> None:
    """A second driver instance has its own connection, like another process would."""
    path = tmp_path / "q.db"
    waiter, writer = make_local(path), make_local(path)
    await waiter.start()
    await writer.start()
    try:
        task = asyncio.create_task(waiter.receive("high", 1, 5))
        await asyncio.sleep(0.3)
        await writer.publish("high", b"foreign")
        [message] = await asyncio.wait_for(task, 2)
        assert message.body == b"foreign"
    finally:
        await waiter.close()
        await writer.close()


async def test_ping_fails_when_file_disappears(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    driver = make_local(path)
    await driver.start()
    try:
        await driver.ping()
        path.rename(tmp_path / "moved.db")
        from priority_pubsub.core.errors import DriverUnavailable

        with pytest.raises(DriverUnavailable):
            await driver.ping()
    finally:
        await driver.close()


@pytest.fixture
def late_broker(tmp_path: Path) -> LateBroker:
    """The local "broker" is the file: its directory is taken by a plain file (a volume not
    mounted yet) until ``bring_up`` clears the way."""
    blocker = tmp_path / "volume"
    blocker.write_text("not mounted yet")
    path = blocker / "queues.db"

    async def bring_up() -> None:
        blocker.unlink()

    async def publish(body: bytes) -> None:
        publisher = make_local(path)
        await publisher.start()
        try:
            await publisher.publish("high", body)
        finally:
            await publisher.close()

    return LateBroker("high", lambda: make_local(path), bring_up, publish)


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_the_wal_is_checkpointed_though_writes_run_on_the_loop(
    tmp_path: Path, synchronous: str
) -> None:
    """Short writes run on the event loop's connection, which never checkpoints (a checkpoint
    syncs files); the worker thread does, every few hundred of them, so the WAL stays
    bounded: 3,000 single-row commits unchecked leave some 30 MB of it. Under ``full`` every
    commit (an fsync) stays on the thread, whose connection checkpoints as SQLite does."""
    driver = make_local(tmp_path / "queues.db", synchronous=synchronous)
    await driver.start()
    try:
        for _ in range(3000):
            await driver.publish("low", b"x" * 200)
        messages = await driver.receive("low", 10, 0)
        wal_bytes = (tmp_path / "queues.db-wal").stat().st_size  # (the last close removes it)
    finally:
        await driver.close()
    assert len(messages) == 10
    assert wal_bytes < 12_000_000


CLOSE_WHILE_PUBLISHING = """
import asyncio, sys
from pathlib import Path
from priority_pubsub.core.errors import DriverUnavailable
from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import LocalDriver
from priority_pubsub.drivers.local.options import LocalOptions

async def one_close(path):
    driver = LocalDriver(LocalOptions(path=path), DriverContext(queues=("q",)))
    await driver.start()
    publishes = [asyncio.ensure_future(driver.publish("q", b"before")) for _ in range(5)]
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(driver.close())
    for _ in range(50):  # arriving while the driver closes: its loop runs short jobs meanwhile
        publishes.append(asyncio.ensure_future(driver.publish("q", b"during")))
        await asyncio.sleep(0)
    await closing
    done, pending = await asyncio.wait(publishes, timeout=5)
    assert not pending, f"{len(pending)} publishes never answered"
    refused = [t.exception() for t in done if t.exception() is not None]
    assert all(isinstance(e, DriverUnavailable) and "stopping" in str(e) for e in refused), refused
    return len(done) - len(refused)

async def main(directory):
    accepted = sum([await one_close(directory / "queues.db") for _ in range(150)])
    reader = LocalDriver(LocalOptions(path=directory / "queues.db"), DriverContext(queues=("q",)))
    await reader.start()
    stored = (await reader.depth("q")).visible
    await reader.close()
    print(accepted, stored)

asyncio.run(main(Path(sys.argv[1])))
"""


def test_closing_while_publishes_arrive_neither_crashes_nor_hangs(tmp_path: Path) -> None:
    """``close`` while publishes keep arriving, 150 times: the loop's SQLite connection was
    closed from a worker thread while the loop ran jobs on it, and the process died in
    libsqlite3 (SIGSEGV). Now every publish is answered: stored, or refused with a
    retriable error naming the stop; every accepted one is in the file."""
    done = subprocess.run([sys.executable, "-c", CLOSE_WHILE_PUBLISHING, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    accepted, stored = (int(n) for n in done.stdout.split())
    assert accepted >= 150 * 5
    assert stored == accepted
