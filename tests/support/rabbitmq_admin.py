"""Test-side RabbitMQ access through aio-pika (not through the driver): publish as a
publisher would, read what reached a queue, clean up.

``RabbitAdmin`` is async; ``SyncRabbit`` wraps it for the synchronous end-to-end tests.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection, ExchangeType


@dataclass(frozen=True)
class Got:
    body: bytes
    headers: dict[str, Any]
    redelivered: bool
    priority: int | None = None


@dataclass
class RabbitAdmin:
    url: str
    made: list[str] = field(default_factory=list)
    exchanges: list[str] = field(default_factory=list)
    _connection: AbstractConnection | None = None

    async def connection(self) -> AbstractConnection:
        if self._connection is None or self._connection.is_closed:
            self._connection = await aio_pika.connect(self.url)
        return self._connection

    def name(self, prefix: str) -> str:
        """A unique queue name, deleted again by ``close``."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.made.append(name)
        return name

    async def declare(self, queue: str, **arguments: Any) -> None:
        channel = await (await self.connection()).channel()
        await channel.declare_queue(queue, durable=True, arguments=arguments or None)
        await channel.close()

    async def publish(self, queue: str, body: bytes, headers: dict[str, Any] | None = None,
                      exchange: str = "", **properties: Any) -> None:
        """To ``queue`` through the default exchange, or to ``exchange`` (routing key "")."""
        channel = await (await self.connection()).channel()
        target = (channel.default_exchange if not exchange
                  else await channel.get_exchange(exchange, ensure=False))
        await target.publish(aio_pika.Message(body, headers=headers, **properties),
                             routing_key="" if exchange else queue)
        await channel.close()

    async def fanout(self, exchange: str) -> None:
        channel = await (await self.connection()).channel()
        await channel.declare_exchange(exchange, ExchangeType.FANOUT, durable=True)
        self.exchanges.append(exchange)
        await channel.close()

    async def drain(self, queue: str, wait_s: float = 0.0) -> list[Got]:
        """Take (and ack) everything ``queue`` holds; wait up to ``wait_s`` for the first."""
        channel = await (await self.connection()).channel()
        declared = await channel.get_queue(queue, ensure=False)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        got: list[Got] = []
        while True:
            incoming = await declared.get(no_ack=True, fail=False)
            if incoming is not None:
                got.append(Got(incoming.body, dict(incoming.headers or {}),
                               incoming.redelivered, incoming.priority))
                continue
            if got or loop.time() >= deadline:
                break
            await asyncio.sleep(0.1)
        await channel.close()
        return got

    async def count(self, queue: str) -> int:
        channel = await (await self.connection()).channel()
        declared = await channel.declare_queue(queue, passive=True)
        await channel.close()
        return int(declared.declaration_result.message_count or 0)

    async def close(self) -> None:
        connection = await self.connection()
        channel = await connection.channel()
        for queue in self.made:
            for name in (queue, f"dlq-{queue}"):
                try:
                    await channel.queue_delete(name)
                except Exception:  # never declared: the channel closed, take a new one
                    channel = await connection.channel()
        for exchange in self.exchanges:
            try:
                await channel.exchange_delete(exchange)
            except Exception:
                channel = await connection.channel()
        await connection.close()


class SyncRabbit:
    """``RabbitAdmin`` for synchronous tests: one event loop of its own."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self.admin = RabbitAdmin(url)
        self.url = url

    def name(self, prefix: str) -> str:
        return self.admin.name(prefix)

    def run(self, coroutine: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coroutine)
        # beside Playwright's sync API (a loop counts as running in this thread): its own
        # loop runs in a thread of its own, one call at a time as here
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(self._loop.run_until_complete, coroutine).result()

    def publish(self, queue: str, body: bytes, headers: dict[str, Any] | None = None,
                **properties: Any) -> None:
        self.run(self.admin.publish(queue, body, headers, **properties))

    def drain(self, queue: str, wait_s: float = 0.0) -> list[Got]:
        result: list[Got] = self.run(self.admin.drain(queue, wait_s))
        return result

    def count(self, queue: str) -> int:
        result: int = self.run(self.admin.count(queue))
        return result

    def close(self) -> None:
        self.run(self.admin.close())
        self._loop.close()
