"""Operator tools behind the CLI: check, publish, stats, requeue.

Each opens the configured driver for the duration of one command and closes it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from priority_pubsub.app.health import build_probe
from priority_pubsub.core.errors import ConfigError, DriverError
from priority_pubsub.delivery.requeue import requeue_one
from priority_pubsub.drivers.base import (
    DepthReporter,
    Driver,
    Pinger,
    Publisher,
    StoreProbe,
)
from priority_pubsub.drivers.registry import build_driver
from priority_pubsub.settings.config import Settings

STATS_VERSION = 1


@contextlib.asynccontextmanager
async def open_driver(
    settings: Settings, start_timeout_s: float = 15.0, *, existing: bool = False
) -> AsyncIterator[Driver]:
    """The configured driver, started; ``existing``: refuse to create an absent store (an
    inspecting command must not report on a fresh empty file it just made)."""
    driver = build_driver(settings)
    if existing and isinstance(driver, StoreProbe) and (missing := driver.missing_store()):
        raise DriverError(missing)
    try:
        await asyncio.wait_for(driver.start(), start_timeout_s)
    except TimeoutError:
        await driver.close()
        raise DriverError(f"driver {settings.driver.type} did not connect within "
                          f"{start_timeout_s:g}s", retriable=True) from None
    except BaseException:
        await driver.close()
        raise
    try:
        yield driver
    finally:
        await driver.close()


async def check_reachability(settings: Settings) -> list[str]:
    """Problems found reaching the driver and the app (empty: all good)."""
    problems: list[str] = []
    try:
        async with open_driver(settings) as driver:
            if isinstance(driver, Pinger):
                await driver.ping()
    except DriverError as exc:
        problems.append(f"driver {settings.driver.type}: {exc}")
    probe = build_probe(settings.app)  # the sidecar's own start gate
    try:
        problem = await probe.check()
    finally:
        await probe.close()
    if problem is not None:
        problems.append(f"app {settings.app.url}: unreachable ({problem})")
    return problems


async def publish_messages(
    settings: Settings,
    queue: str,
    body: bytes,
    attributes: Mapping[str, str],
    count: int,
    content_type: str | None,
    via_sns: str | None = None,
) -> list[str]:
    from priority_pubsub.transforms.base import Payload, TransformChain

    chain = TransformChain.from_config(settings.transforms)

    async def prepared() -> Payload:  # each message its own (e.g. its own offloaded object)
        return await chain.before_publish(Payload(body, dict(attributes), content_type))

    ids: list[str] = []
    async with open_driver(settings) as driver:
        if via_sns is not None:
            publish_sns = getattr(driver, "publish_via_sns", None)
            if publish_sns is None:
                raise ConfigError(f"--via-sns needs the sqs driver, not {settings.driver.type}")
            for _ in range(count):
                payload = await prepared()
                ids.append(await publish_sns(via_sns, payload.body, payload.attributes))
            return ids
        if not isinstance(driver, Publisher):
            raise ConfigError(f"driver {settings.driver.type} cannot publish")
        sender: Publisher = driver

        async def one() -> str:
            payload = await prepared()
            return await sender.publish(queue, payload.body, payload.attributes,
                                        payload.content_type)

        for start in range(0, count, 100):  # concurrent in chunks: batched by the driver
            chunk = min(100, count - start)
            ids += await asyncio.gather(*(one() for _ in range(chunk)))
        return ids


async def collect_stats(settings: Settings) -> dict[str, Any]:
    """The ``stats --json`` document (version 1, documented in docs/reference/index.md)."""
    async with open_driver(settings, existing=True) as driver:
        queues = [
            {"name": name, "priority": priority, **await _depth(driver, name)}
            for priority, name in enumerate(settings.queue_names)
        ]
        dead = None
        if settings.dead_letter is not None:
            dead = {"name": settings.dead_letter.queue,
                    **await _depth(driver, settings.dead_letter.queue)}
    return {"v": STATS_VERSION, "driver": settings.driver.type, "queues": queues,
            "dead_letter": dead}


async def _depth(driver: Driver, queue: str) -> dict[str, Any]:
    if not isinstance(driver, DepthReporter):
        return {"visible": None, "in_flight": None, "delayed": None, "oldest_age_s": None}
    depth = await driver.depth(queue)
    age = None if depth.oldest_age_s is None else round(depth.oldest_age_s, 3)
    return {"visible": depth.visible, "in_flight": depth.in_flight, "delayed": depth.delayed,
            "oldest_age_s": age}


def render_stats_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"priority-pubsub queues ({report['driver']})")
    for column in ("queue", "priority", "visible", "in flight", "delayed", "oldest age (s)"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    rows = [(q, str(q["priority"])) for q in report["queues"]]
    if report["dead_letter"]:
        rows.append((report["dead_letter"], "dead letters"))
    for entry, priority in rows:
        table.add_row(entry["name"], priority, *(
            "unknown" if entry[key] is None else str(entry[key])
            for key in ("visible", "in_flight", "delayed", "oldest_age_s")
        ))
    Console().print(table)


async def requeue_messages(
    settings: Settings, from_queue: str, to_queue: str, limit: int | None
) -> int:
    """Move dead letters back: publish to ``to_queue`` first, then ack from ``from_queue``.

    An interruption between the two leaves the message in both queues, never in neither.
    """
    moved = 0
    async with open_driver(settings, existing=True) as driver:
        if not isinstance(driver, Publisher):
            raise ConfigError(f"driver {settings.driver.type} cannot publish")
        while limit is None or moved < limit:
            want = 10 if limit is None else min(10, limit - moved)
            batch = await driver.receive(from_queue, want, 0)
            if not batch:
                break
            for message in batch:
                await requeue_one(driver, message, from_queue, to_queue)
                moved += 1
    return moved

