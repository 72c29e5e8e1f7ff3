"""Dapr mode at run time: create the component's entities (as daprd does at start, unless
``disableEntityManagement``), then run the sidecar with daprd's requests and per-subscription
dead-letter topics, reloading the config and the resources live (``dapr.reload``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from priority_pubsub.app.channel.bulk import BulkSettings
from priority_pubsub.app.channel.streams import StreamHub, TopicRefused
from priority_pubsub.dapr.components import Entities
from priority_pubsub.dapr.dead_letters import DeadLetterTopics
from priority_pubsub.dapr.flags import DaprdFlags
from priority_pubsub.dapr.plan import DaprPlan
from priority_pubsub.dapr.reload import DaprReload
from priority_pubsub.dapr.request_builder import DaprRequestBuilder
from priority_pubsub.dapr.setup import Loaded
from priority_pubsub.settings.config import Settings
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from priority_pubsub.sidecar import Sidecar

log = get_logger("priority_pubsub.dapr")
DaprReloadFrom = tuple[Path | None, DaprdFlags]
"""What the process started with, to read again: the config path and daprd's flags."""


def report(plan: DaprPlan | None, warnings: tuple[str, ...]) -> None:
    """The start's notes and warnings (daprd flags ignored, settings not honoured)."""
    for warning in warnings:
        log.warning(warning)
    if plan is None:
        return
    for note in plan.notes:
        log.info(note)
    log.info("dapr subscriptions", component=plan.component.name, type=plan.component.type,
             queues=[{"queue": q.name, "topics": list(q.topics)} for q in plan.queues],
             namespace_prefix=plan.component.topic_prefix or None)


async def run_dapr(loaded: Loaded, streams: StreamHub | None = None, *,
                   reload: DaprReloadFrom | None = None) -> None:
    """``reload``: the config path and daprd's flags the process started with (None: no
    live reload)."""
    from priority_pubsub.drivers.registry import build_driver
    from priority_pubsub.sidecar import Sidecar

    settings, plan = loaded.settings, loaded.plan
    assert plan is not None

    entities = plan.entities(settings.driver.options())
    if entities is not None:  # the dead letters too: the driver resolves them at start
        queues = [(q.name, q.topics) for q in plan.queues]
        await asyncio.to_thread(entities.ensure, queues, _dead_letter_queue(settings))
    request_builder = DaprRequestBuilder(plan, settings.app, streams)
    driver = DeadLetterTopics(build_driver(settings), request_builder,
                              entities.publish if entities is not None else None)
    bulk = bulk_topics(plan) if settings.app.push else None  # streams take one by one
    source = (DaprReload(*reload, loaded, request_builder, entities).source()
              if reload is not None else None)
    sidecar = Sidecar(settings, driver=driver, request_builder=request_builder, bulk=bulk,
                      streams=streams, reload=source)
    if streams is not None:
        streams.make_queue = StreamTopics(settings, plan, entities, request_builder,
                                          sidecar).make
    await sidecar.run()


@dataclass(frozen=True)
class StreamTopics:
    """A stream's topic unknown at start, in Dapr mode: its queue named and made as the
    component makes queues (``ensure``: daprd's entity management, nothing made with
    ``disableEntityManagement``, and then a missing queue refuses the stream), delivered as
    a subscription of its own, received from below every known topic."""

    settings: Settings
    plan: DaprPlan
    entities: Entities | None
    request_builder: DaprRequestBuilder
    sidecar: Sidecar

    async def make(self, topic: str) -> str:
        plan = self.plan
        shared = self.settings.dapr is not None and self.settings.dapr.queue_layout == "shared"
        queue = (plan.kind.shared_queue(plan.component) if shared else None) or plan.queue_of(
            topic)
        if self.entities is not None:
            try:
                await asyncio.to_thread(self.entities.ensure, [(queue, (topic,))],
                                        _dead_letter_queue(self.settings))
            except Exception as exc:  # boto3 and other SDK errors, at this boundary
                raise TopicRefused(f"topic {topic}: making queue {queue} failed: {exc}",
                                   "UNAVAILABLE") from exc
        self.request_builder.add_topic(topic, queue)  # before its first message can come
        try:
            await self.sidecar.add_queue(queue)  # refused when the queue is not there
        except TopicRefused as exc:
            why = " (disableEntityManagement: nothing is made)" if self.entities is not None \
                and not getattr(self.entities, "manage", True) else ""
            raise TopicRefused(f"topic {topic}: {exc}{why}", exc.code) from None
        return queue


def _dead_letter_queue(settings: Settings) -> str | None:
    """The component's dead letters (snssqs ``sqsDeadLettersQueueName``), made with queues."""
    return settings.dead_letter.queue if settings.dead_letter else None


def bulk_topics(plan: DaprPlan) -> dict[str, BulkSettings]:
    """The topics whose subscription enables ``bulkSubscribe``, with its limits."""
    return {topic: BulkSettings(s.bulk_max_messages, s.bulk_max_await_ms / 1000)
            for topic, s in plan.subscriptions.items() if s.bulk}
