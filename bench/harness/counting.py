"""Broker API calls counted while a benchmark runs, at the broker wherever the broker can say.

One counter per driver, each started just before the measured run (after queues are created
and preloaded) and stopped after it; ``stop`` answers the requests by operation. Where each
count comes from, so a reader knows what the number means:

  sqs         moto server's request recorder (every HTTP request the server received, by
              operation); the botocore ``before-send`` count of the driver's client is kept
              next to it as a cross-check. On ministack (no recorder), the client count only.
  gcp_pubsub  the driver's own RPC counts (pull, acknowledge, modify_ack_deadline): the
              emulator counts nothing and gRPC has no hook as simple.
  redis       the server: ``MONITOR`` (commands clients sent; those a Lua script runs inside
              Redis are reported apart, as ``inside_scripts``), cross-checked against the sum
              of ``INFO commandstats`` (every command the server ran).
  rabbitmq    the client: AMQP methods the driver's connections sent (aiormq frames; content
              headers, bodies and heartbeats excluded). The private rabbitmq-server runs
              without the management plugin, and its own counters count messages, not
              methods: they are kept next to it (``server_messages``: messages delivered,
              empty basic.get answers, messages acked) as a cross-check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections import Counter
from typing import Any, Protocol
from urllib.parse import parse_qs

from bench.harness.brokers import Broker, MotoSqsBroker, RabbitBroker, RedisBroker
from bench.harness.output import log
from priority_pubsub.drivers.base import Driver

WHERE = {
    "sqs": "broker: moto server's request recorder (client hook as cross-check)",
    "gcp_pubsub": "driver: its own RPC counts (the emulator counts nothing)",
    "redis": "broker: MONITOR (client commands), INFO commandstats as cross-check",
    "rabbitmq": "client: AMQP methods sent (the node's message counters as cross-check)",
}


class CallCounter(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> dict[str, Any]:
        """``{"requests": {operation: n}, ...}``: requests since ``start``, plus cross-checks."""
        ...


class SqsCounter:
    """moto's recorder (server side) when the broker is moto, and the client's own count."""

    def __init__(self, broker: Broker, driver: Driver) -> None:
        self.broker = broker
        self.client_sent: Counter[str] = Counter()
        self._counting = False
        client = driver._api.sqs  # type: ignore[attr-defined]
        client.meta.events.register("before-send.sqs", self._count)

    def _count(self, event_name: str, **_: Any) -> None:
        if self._counting:
            self.client_sent[event_name.rsplit(".", 1)[-1]] += 1

    async def start(self) -> None:
        if isinstance(self.broker, MotoSqsBroker):
            await asyncio.to_thread(self.broker.recorder, "reset-recording")
            await asyncio.to_thread(self.broker.recorder, "start-recording")
        self._counting = True

    async def stop(self) -> dict[str, Any]:
        self._counting = False
        client = dict(self.client_sent)
        if not isinstance(self.broker, MotoSqsBroker):
            return {"requests": client}
        await asyncio.to_thread(self.broker.recorder, "stop-recording")
        recorded = await asyncio.to_thread(self.broker.recorder, "download-recording")
        return {"requests": dict(recorded_operations(recorded)), "client_sent": client}


def recorded_operations(recording: str) -> Counter[str]:
    """Operations in moto's recording: JSON protocol (``X-Amz-Target: AmazonSQS.Op``) or
    query protocol (``Action=Op`` in the body or the URL)."""
    found: Counter[str] = Counter()
    for line in recording.splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        headers = {k.lower(): v for k, v in entry.get("headers", {}).items()}
        target = headers.get("x-amz-target")
        if target:
            found[target.rsplit(".", 1)[-1]] += 1
            continue
        body = entry.get("body") or ""
        action = parse_qs(body if isinstance(body, str) else "").get("Action")
        query = parse_qs(entry.get("url", "").partition("?")[2]).get("Action")
        found[(action or query or ["unknown"])[0]] += 1
    return found


class GcpCounter:
    """The Pub/Sub driver's own counts of its RPCs, as a difference over the run."""

    def __init__(self, driver: Driver) -> None:
        self.driver: Any = driver
        self._before: Counter[str] = Counter()

    def _now(self) -> Counter[str]:
        return Counter({**self.driver.calls, "pull": self.driver.pull_calls})

    async def start(self) -> None:
        self._before = self._now()

    async def stop(self) -> dict[str, Any]:
        return {"requests": dict(self._now() - self._before)}


class RedisCounter:
    """``MONITOR`` on the broker's own redis-server: every command a client sent, and apart
    those Lua scripts ran inside Redis; ``INFO commandstats`` summed as a cross-check."""

    MARK = "bench-counting-mark"

    def __init__(self, broker: RedisBroker) -> None:
        self.broker = broker
        self.sent: Counter[str] = Counter()
        self.inside: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None
        self._marked = asyncio.Event()
        self._stats_before = 0

    async def _server_total(self) -> int:
        stats = await self.broker.client.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items()
                   if k not in ("cmdstat_info", "cmdstat_echo", "cmdstat_monitor"))

    async def start(self) -> None:
        ready = asyncio.Event()

        from redis import exceptions as redis_errors

        async def listen() -> None:
            # A read that times out means no command came for that long (an idle sidecar
            # blocked in XREAD): MONITOR again; only the reconnect's instant goes unseen.
            while True:
                with contextlib.suppress(redis_errors.TimeoutError):
                    async with self.broker.client.monitor() as monitor:
                        ready.set()
                        async for command in monitor.listen():
                            if self._count(command):
                                self._marked.set()
                                return

        self._stats_before = await self._server_total()
        self._task = asyncio.create_task(listen())
        await ready.wait()

    def _count(self, command: dict[str, Any]) -> bool:
        """Count one monitored command; True at this counter's end mark."""
        words = str(command["command"]).split()
        name = words[0].lower() if words else "?"
        if name == "echo" and self.MARK in command["command"]:
            return True
        if name not in ("info", "echo"):  # those are this counter's own
            (self.inside if command["client_type"] == "lua" else self.sent)[name] += 1
        return False

    async def stop(self) -> dict[str, Any]:
        total = await self._server_total() - self._stats_before
        await self.broker.client.echo(self.MARK)  # everything before it has been seen
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._marked.wait(), 30)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return {"requests": dict(self.sent), "inside_scripts": dict(self.inside),
                "commandstats_total": total}


class AmqpCounter:
    """AMQP methods sent by every aiormq connection of this process while counting (the
    preloading publisher has closed by then): one patched ``ChannelFrame.marshall``. The
    node's own message counters (``RabbitBroker.global_counters``) over the same span are
    kept next to them as a server-side cross-check of the basic.get and basic.ack counts."""

    CROSS_CHECK = {  # what the node counted: basic.get is delivered + get_empty there
        "delivered": "messages_delivered_total",  # by basic.get or pushed to a consumer
        "get_empty": "messages_get_empty_total",
        "acknowledged": "messages_acknowledged_total",
    }

    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self.sent: Counter[str] = Counter()
        self._original: Any = None
        self._server_before: dict[str, int] | None = None

    async def _server(self) -> dict[str, int] | None:
        """The node's counters, or None when ``rabbitmqctl`` cannot say (the cross-check is
        then missing; the count itself does not depend on it)."""
        try:
            return await asyncio.to_thread(self.broker.global_counters)
        except (OSError, subprocess.SubprocessError) as exc:
            log(f"rabbitmqctl: no node counters ({exc}); no cross-check")
            return None

    async def start(self) -> None:
        self._server_before = await self._server()
        from aiormq.abc import ChannelFrame
        from pamqp.base import Frame

        original = ChannelFrame.__dict__["marshall"]
        sent = self.sent

        def marshall(cls: Any, channel_number: int, frames: Any, *rest: Any,
                     **named: Any) -> Any:
            frames = list(frames)
            for frame in frames:
                if isinstance(frame, Frame) and "." in getattr(frame, "name", ""):
                    sent[frame.name] += 1  # a method: Basic.Ack, Basic.Get, Channel.Open...
            return original.__func__(cls, channel_number, frames, *rest, **named)

        self._original = original
        ChannelFrame.marshall = classmethod(marshall)  # type: ignore[method-assign,assignment]

    async def stop(self) -> dict[str, Any]:
        from aiormq.abc import ChannelFrame

        if self._original is not None:
            ChannelFrame.marshall = self._original  # type: ignore[method-assign]
        before, after = self._server_before, await self._server()
        if before is None or after is None:
            return {"requests": dict(self.sent)}
        server = {name: after.get(key, 0) - before.get(key, 0)
                  for name, key in self.CROSS_CHECK.items()}
        return {"requests": dict(self.sent), "server_messages": server}


def counter_for(name: str, broker: Broker, driver: Driver) -> CallCounter:
    if name == "sqs":
        return SqsCounter(broker, driver)
    if name == "gcp_pubsub":
        return GcpCounter(driver)
    if name == "redis":
        assert isinstance(broker, RedisBroker)
        return RedisCounter(broker)
    if name == "rabbitmq":
        assert isinstance(broker, RabbitBroker)
        return AmqpCounter(broker)
    raise ValueError(f"no call counter for {name}")


def agreement(counted: dict[str, Any]) -> str | None:
    """The cross-check of one run in a few words: the two counts that should agree."""
    requests = counted["requests"]
    if "client_sent" in counted:
        return (f"recorded by moto {sum(requests.values())}, sent by the client "
                f"{sum(counted['client_sent'].values())}")
    if "commandstats_total" in counted:
        monitored = sum(requests.values()) + sum(counted["inside_scripts"].values())
        return f"MONITOR {monitored}, commandstats {counted['commandstats_total']}"
    if "server_messages" in counted:
        server = counted["server_messages"]
        return (f"Basic.Get {requests.get('Basic.Get', 0)}, node delivered + empty "
                f"{server['delivered'] + server['get_empty']}; Basic.Ack "
                f"{requests.get('Basic.Ack', 0)}, node acked {server['acknowledged']}")
    return None
