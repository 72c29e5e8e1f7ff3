"""A consumer that hands messages back unseen and is killed at once: the conformance test of
a release right before a kill.

``python -m tests.support.release_then_die CONFIG QUEUE COUNT``: builds the driver the
sidecar config names, receives ``COUNT`` messages from ``QUEUE``, leaves a waiting receive
on that queue cut short (as the dispatcher leaves the waits that lose a race: on Pub/Sub and
SQS the broker call goes on, parked), hands the messages back with ``release`` (what the
dispatcher does with a surplus), prints ``released <ids>`` and kills itself with SIGKILL:
no close, no cleanup, the worst moment for a message in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.settings.config import load_config

WAIT_S = 20.0


async def release_then_die(config: Path, queue: str, count: int) -> None:
    driver = build_driver(load_config(config))
    await driver.start()
    taken = []
    while len(taken) < count:
        taken += await driver.receive(queue, count - len(taken), WAIT_S)
    waiting = asyncio.create_task(driver.receive(queue, count, WAIT_S))
    await asyncio.sleep(0.2)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await asyncio.gather(*(driver.release(message, 0.0) for message in taken))
    print("released", " ".join(message.id for message in taken), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(release_then_die(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
