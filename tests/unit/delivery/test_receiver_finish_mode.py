"""``shutdown.mode: finish`` in the parts: the receiver's stop waits for
every task however long past ``grace_s``, cancelling none; the ops server serves ``GET
/drain`` only when given the drain, and answers ``?wait=true`` once it is done.
(End to end, with real processes: ``tests/e2e/test_finish_shutdown.py``.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest

from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.delivery.receiver import Receiver
from priority_pubsub.settings.config import ServerConfig, validate_config
from priority_pubsub.telemetry.metrics import Metrics
from priority_pubsub.telemetry.observer import DeliveryObserver
from priority_pubsub.telemetry.server import OpsServer


class OneTake:
    """Hands out ``count`` messages once, then waits forever (as an empty queue does)."""

    def __init__(self, count: int) -> None:
        self._messages = [Message(f"m{n}", "q", 0, b"{}", {}, 1, now_ms(),
                                  Lease(None, now_ms() + 60_000)) for n in range(count)]

    async def take(self, free: int, why_abandoned: Callable[[], str], **_: object
                   ) -> list[Message]:
        if not self._messages:
            await asyncio.Event().wait()
        taken, self._messages = self._messages[:free], self._messages[free:]
        return taken


class SlowWorker:
    def __init__(self, task_s: float) -> None:
        self.task_s = task_s
        self.finished: list[str] = []
        self.cancelled: list[str] = []

    async def handle(self, message: Message, answered: Callable[[], None] = lambda: None
                     ) -> None:
        try:
            await asyncio.sleep(self.task_s)
        except asyncio.CancelledError:
            self.cancelled.append(message.id)
            raise
        self.finished.append(message.id)


@pytest.mark.parametrize(("mode", "finished", "cancelled"), [
    ("finish", ["m0", "m1"], []),
    ("return", [], ["m0", "m1"]),  # today's: cut short at grace_s
])
async def test_the_stop_waits_for_every_task_in_finish_mode(
    mode: str, finished: list[str], cancelled: list[str]
) -> None:
    settings = validate_config({"queues": [{"name": "q"}], "concurrency": 2,
                                "shutdown": {"mode": mode, "grace_s": 0.05}})
    worker = SlowWorker(task_s=0.6)
    receiver = Receiver(settings, OneTake(2), worker,  # type: ignore[arg-type]
                        DeliveryObserver(Metrics(), None, driver_type="fake"))
    await receiver.start()
    while receiver.in_flight < 2:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    await receiver.stop()
    assert (sorted(worker.finished), sorted(worker.cancelled)) == (finished, cancelled)
    assert receiver.in_flight == 0


async def test_get_drain_is_served_only_with_a_drain() -> None:
    done = asyncio.Event()
    calls: list[str] = []

    async def drain() -> None:
        calls.append("drain")
        await done.wait()

    async def ready() -> str | None:
        return None

    without = OpsServer(ServerConfig(port=0), stalled=lambda: False, readiness_problem=ready,
                        render_metrics=lambda: b"")
    with_drain = OpsServer(ServerConfig(port=0), stalled=lambda: False,
                           readiness_problem=ready, render_metrics=lambda: b"", drain=drain)
    await without.start()
    await with_drain.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{without.port}/drain?wait=true") as r:
                assert r.status == 404
            waiting = asyncio.create_task(
                session.get(f"http://127.0.0.1:{with_drain.port}/drain?wait=true"))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # answered only once the drain is over
            async with session.get(f"http://127.0.0.1:{with_drain.port}/drain") as r:
                assert r.status == 202  # no wait: started, answered at once
            done.set()
            async with await waiting as r:
                assert (r.status, await r.json()) == (200, {"status": "drained"})
    finally:
        await without.stop()
        await with_drain.stop()
    assert calls == ["drain", "drain"]
