"""The loops the sidecar is compared against, and a probe that times the sidecar itself.

* ``broker_limit``: the driver's own receive + ack at a concurrency, no app (a).
* ``app_limit``: a plain aiohttp POST loop of the same CloudEvents, no broker (b).
* ``naive_forwarder``: receive, POST, ack; no leases, journal, metrics or priorities (c).
* ``run_sidecar``: ``priority_pubsub.sidecar.Sidecar`` as shipped, in this process (d).

All of them run on the caller's event loop (the sidecar's default in the benchmark scripts).
Rates are messages per second from the first message received to the last one settled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import aiohttp

from priority_pubsub.app.cloudevent import build_request
from priority_pubsub.core.app_request import AppRequest
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import Driver
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.settings.config import Settings
from priority_pubsub.sidecar import Sidecar
from priority_pubsub.transforms.base import Payload

EMPTY_PAUSE_S = 0.002
"""A zero-wait receive that came back empty while others still hold messages: pause a little
rather than spin on the broker."""


@dataclass
class Probe:
    """Wraps a driver instance's ``receive`` and ``ack`` to time and count what passes."""

    target: int
    record_ids: bool = False
    first_s: float | None = None
    last_s: float | None = None
    first_cpu_s: float = 0.0
    last_cpu_s: float = 0.0
    acked: int = 0
    received: int = 0
    receive_calls: int = 0
    received_ns: dict[str, int] = field(default_factory=dict)
    by_queue: dict[str, int] = field(default_factory=dict)
    acked_by_queue: dict[str, int] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def attach(self, driver: Driver) -> None:
        receive, ack = driver.receive, driver.ack

        async def timed_receive(queue: str, max_messages: int, wait_s: float) -> list[Message]:
            batch = await receive(queue, max_messages, wait_s)
            self.receive_calls += 1
            if batch:
                stamp = time.time_ns()
                if self.first_s is None:
                    self.first_s = time.perf_counter()
                    self.first_cpu_s = time.process_time()
                self.received += len(batch)
                self.by_queue[queue] = self.by_queue.get(queue, 0) + len(batch)
                if self.record_ids:
                    for message in batch:
                        self.received_ns[message.id] = stamp
            return batch

        async def counted_ack(message: Message) -> None:
            await ack(message)
            self.acked += 1
            self.acked_by_queue[message.queue] = self.acked_by_queue.get(message.queue, 0) + 1
            if self.acked >= self.target and not self.done.is_set():
                self.last_s = time.perf_counter()
                self.last_cpu_s = time.process_time()
                self.done.set()

        setattr(driver, "receive", timed_receive)  # noqa: B010 - instance patch, on purpose
        setattr(driver, "ack", counted_ack)  # noqa: B010

    @property
    def rate(self) -> float | None:
        if self.first_s is None or self.last_s is None or self.last_s <= self.first_s:
            return None
        return self.acked / (self.last_s - self.first_s)

    @property
    def result(self) -> Result:
        cpu = (self.last_cpu_s - self.first_cpu_s) / self.acked * 1e6 if self.rate else None
        return Result(self.rate, cpu)


class Result(NamedTuple):
    """Messages per second, and CPU µs this process spent per message (all threads), both
    from the first message received to the last settled: start-up and shutdown excluded."""

    rate: float | None
    cpu_us: float | None


def to_request(message: Message) -> AppRequest:
    payload = Payload(message.body, dict(message.attributes), message.content_type)
    return build_request(message, payload, delivery="cloudevent", api_token="")


def fake_message(index: int, body: bytes, queue: str = "bench") -> Message:
    return Message(id=f"app-limit-{index}", queue=queue, priority=0, body=body, attributes={},
                   attempt=1, enqueued_ms=now_ms(), lease=Lease(None, 0))


def client_session(concurrency: int) -> aiohttp.ClientSession:
    """The same connector shape as the sidecar's forwarder."""
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency,
                                     keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60))


async def forward_and_ack(session: aiohttp.ClientSession, url: str, driver: Driver,
                          message: Message) -> None:
    """What a naive forwarder does with a message: POST it to the app, then ack it."""
    request = to_request(message)
    async with session.post(url, data=request.body, headers=request.headers) as rsp:
        await rsp.read()
    await driver.ack(message)


def one_at_a_time(driver: Driver, queue: str, count: int,
                  handle: Callable[[Message], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """A worker for ``_timed``: receive one message at a time (no wait, a short pause when
    the queue is empty) and ``handle`` it, until the workers have handled ``count``."""
    handled = [0]  # shared by the concurrent workers of one loop

    async def work() -> None:
        while handled[0] < count:
            batch = await driver.receive(queue, 1, 0)
            if not batch:
                await asyncio.sleep(EMPTY_PAUSE_S)
            for message in batch:
                await handle(message)
                handled[0] += 1

    return work


async def broker_limit(settings: Settings, queue: str, count: int, concurrency: int,
                       timeout_s: float) -> Result:
    driver = build_driver(settings)
    await driver.start()
    try:
        work = one_at_a_time(driver, queue, count, driver.ack)
        return await _timed(work, concurrency, count, timeout_s)
    finally:
        await driver.close()


async def app_limit(url: str, requests: Sequence[AppRequest], concurrency: int,
                    timeout_s: float) -> Result:
    async with client_session(concurrency) as session:
        cursor = iter(range(len(requests)))

        async def work() -> None:
            for index in cursor:
                request = requests[index]
                async with session.post(url, data=request.body, headers=request.headers) as rsp:
                    await rsp.read()

        return await _timed(work, concurrency, len(requests), timeout_s)


async def naive_forwarder(settings: Settings, queue: str, count: int, concurrency: int,
                          timeout_s: float) -> Result:
    driver = build_driver(settings)
    await driver.start()
    url = settings.app.url.get_secret_value()
    try:
        async with client_session(concurrency) as session:
            async def forward(message: Message) -> None:
                await forward_and_ack(session, url, driver, message)

            work = one_at_a_time(driver, queue, count, forward)
            return await _timed(work, concurrency, count, timeout_s)
    finally:
        await driver.close()


async def run_sidecar(settings: Settings, count: int, timeout_s: float,
                      until: Callable[[Probe], bool] | None = None,
                      driver: Driver | None = None) -> Probe:
    """Run the shipped sidecar until ``count`` messages are acked; return its probe.
    ``driver``: one built (and adjusted) by the caller, else the settings' own."""
    driver = driver or build_driver(settings)
    probe = Probe(count)
    probe.attach(driver)
    sidecar = Sidecar(settings, driver=driver)
    running = asyncio.create_task(sidecar.run(handle_signals=False))
    try:
        await asyncio.wait_for(probe.done.wait(), timeout_s)
    except TimeoutError:
        pass
    finally:
        sidecar.request_stop()
        await running
    return probe


async def _timed(work: Callable[[], Awaitable[None]], concurrency: int, count: int,
                 timeout_s: float) -> Result:
    started, cpu = time.perf_counter(), time.process_time()
    tasks = [asyncio.ensure_future(work()) for _ in range(concurrency)]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()
    if pending:
        return Result(None, None)
    return Result(count / (time.perf_counter() - started),
                  (time.process_time() - cpu) / count * 1e6)
