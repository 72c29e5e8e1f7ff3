"""The local driver's topology: one SQLite file, queues exist as soon as they are named."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from priority_pubsub.drivers.base import DriverContext
from priority_pubsub.drivers.local.driver import DEAD_LETTER_REASON, LocalDriver
from priority_pubsub.drivers.local.options import LocalOptions
from tests.support.topologies.base import DeadLetter

T = TypeVar("T")
DEAD = "dead"


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh loop in a worker thread, so sync tests and
    async tests (whose loop is running) can both call the topology."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class LocalTopology:
    """Queues in ``directory/queues.db``; dead letters go to the ``dead`` queue."""

    driver_type: ClassVar[str] = "local"

    def __init__(self, directory: Path) -> None:
        self.path = directory / "queues.db"
        self.prefix = f"q{uuid.uuid4().hex[:6]}"

    def driver(self, queues: tuple[str, ...] = (), lease_s: float = 30,
               **options: Any) -> LocalDriver:
        """An unstarted driver on this file (for the driver tests and for publishing)."""
        context = DriverContext(queues=queues, dead_letter_queue=DEAD, lease_duration_s=lease_s)
        return LocalDriver(LocalOptions(path=self.path, **options), context)

    def queue(self, suffix: str, lease_s: float = 2.0) -> str:
        return f"{self.prefix}-{suffix}"

    def publish(self, queue: str, body: bytes,
                attributes: Mapping[str, str] | None = None) -> None:
        async def publish() -> None:
            driver = self.driver()
            await driver.start()
            try:
                await driver.publish(queue, body, attributes)
            finally:
                await driver.close()

        run_sync(publish())

    def dead_letters(self) -> list[DeadLetter]:
        async def drain() -> list[DeadLetter]:
            driver = self.driver()
            await driver.start()
            letters: list[DeadLetter] = []
            try:
                while batch := await driver.receive(DEAD, 10, 0):
                    for message in batch:
                        letters.append(DeadLetter(message.body, dict(message.attributes),
                                                  message.attributes.get(DEAD_LETTER_REASON)))
                        await driver.ack(message)
            finally:
                await driver.close()
            return letters

        return run_sync(drain())

    def driver_options(self) -> dict[str, Any]:
        return {"type": self.driver_type, "path": str(self.path)}

    def dead_letter_config(self) -> dict[str, Any] | None:
        return {"queue": DEAD}

    def close(self) -> None:
        pass
