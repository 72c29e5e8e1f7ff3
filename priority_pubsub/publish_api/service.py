"""What a publish does, whichever protocol asked: check the pubsub and topic as daprd checks
them, build daprd's CloudEvent, and hand the bytes to the sink — the configured queue
(native mode) or the component's topic (Dapr mode). The sink returns only once the broker
has the message, so a 204 means durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from priority_pubsub.core.errors import DriverError
from priority_pubsub.drivers.base import Driver, Publisher
from priority_pubsub.publish_api import errors
from priority_pubsub.publish_api.envelope import (
    CLOUDEVENT_JSON,
    EnvelopeError,
    MetadataError,
    Trace,
    apply_ttl,
    build_event,
    is_raw_payload,
    serialise,
)
from priority_pubsub.telemetry.logs import get_logger

log = get_logger("priority_pubsub.publish_api")


class Sink(Protocol):
    """Where published bytes go; ``publish`` returns once the broker holds them."""

    def refuses(self, topic: str) -> str | None:
        """Why this topic cannot be published to here, or None."""
        ...

    async def start(self) -> None: ...

    async def publish(self, topic: str, data: bytes, content_type: str) -> None: ...

    async def close(self) -> None: ...


class QueueSink:
    """Native mode: the topic is the name of a configured queue (one per priority)."""

    def __init__(self, driver: Driver, queues: Sequence[str]) -> None:
        if not isinstance(driver, Publisher):
            raise TypeError(f"driver {driver.name} cannot publish")
        self._driver = driver
        self._publisher: Publisher = driver
        self.queues = tuple(queues)
        self._added: Callable[[], Collection[str]] = tuple

    def also(self, added: Callable[[], Collection[str]]) -> None:
        """Queues made while running (streamed topics unknown at start) take publishes too."""
        self._added = added

    def refuses(self, topic: str) -> str | None:
        return None if topic in self.queues or topic in self._added() else "no queue"

    async def start(self) -> None:
        await self._driver.start()

    async def publish(self, topic: str, data: bytes, content_type: str) -> None:
        await self._publisher.publish(topic, data, None, content_type)

    async def close(self) -> None:
        await self._driver.close()


class TopicPublisher(Protocol):
    def publish(self, topic: str, data: bytes) -> None: ...


class ComponentSink:
    """Dapr mode: through the component to the topic, where daprd would publish (blocking
    SDK calls, run in threads)."""

    def __init__(self, entities: TopicPublisher) -> None:
        self._entities = entities

    def refuses(self, topic: str) -> str | None:
        return None

    async def start(self) -> None:
        return None

    async def publish(self, topic: str, data: bytes, content_type: str) -> None:
        try:
            await asyncio.to_thread(self._entities.publish, topic, data)
        except DriverError:
            raise
        except Exception as exc:  # boto3 and other SDK errors, at this boundary
            raise DriverError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        return None


@dataclass(frozen=True)
class BulkEntry:
    entry_id: str
    data: bytes
    content_type: str
    metadata: Mapping[str, str] | None = None


@dataclass
class PublishService:
    """The checks and the envelope; ``pubsub_name`` is the only name this API answers to."""

    pubsub_name: str
    app_id: str
    sink: Sink
    ready: bool = field(default=False, init=False)

    async def start(self) -> None:
        await self.sink.start()
        self.ready = True

    async def close(self) -> None:
        self.ready = False
        await self.sink.close()

    def check(self, pubsub: str, topic: str, metadata: Mapping[str, str], *,
              grpc: bool = False) -> bool:
        """daprd's ``validateAndGetPubsubAndTopic`` (plus our no-queue check); returns
        ``rawPayload``. Raises ``DaprError``."""
        if not pubsub:
            raise errors.name_empty(metadata)
        if pubsub != self.pubsub_name:
            raise errors.not_found(pubsub, None if grpc else metadata)
        if not topic:
            raise errors.topic_empty(pubsub, metadata)
        if self.sink.refuses(topic) is not None:
            queues = getattr(self.sink, "queues", ())
            raise errors.topic_not_found(pubsub, topic, tuple(queues))
        try:
            return is_raw_payload(metadata)
        except MetadataError as exc:
            raise errors.bad_metadata(pubsub, metadata, str(exc)) from None

    def envelope(self, topic: str, body: bytes, content_type: str,
                 metadata: Mapping[str, str], trace: Trace) -> tuple[bytes, str]:
        """The bytes daprd hands the component, and their content type."""
        try:
            event = build_event(body, content_type, topic=topic, pubsub_name=self.pubsub_name,
                                source=self.app_id, metadata=metadata, trace=trace)
        except EnvelopeError as exc:
            raise errors.cloud_event_creation(self.pubsub_name, self.app_id, str(exc)) from None
        try:
            apply_ttl(event, metadata)
        except MetadataError as exc:
            raise errors.bad_metadata(self.pubsub_name, metadata, str(exc)) from None
        return serialise(event), CLOUDEVENT_JSON

    async def publish(self, pubsub: str, topic: str, body: bytes, content_type: str,
                      metadata: Mapping[str, str], trace: Trace, *, grpc: bool = False) -> None:
        raw = self.check(pubsub, topic, metadata, grpc=grpc)
        data, kind = (body, content_type) if raw else self.envelope(
            topic, body, content_type, metadata, trace)
        await self._send(topic, data, kind)

    async def publish_bulk(self, topic: str, entries: Sequence[BulkEntry],
                           metadata: Mapping[str, str], trace: Trace, raw: bool
                           ) -> list[tuple[str, str]]:
        """Every entry, concurrently (daprd's default bulk publisher); the failed ones as
        ``(entry_id, error)``. Entries are checked (``check``) by the caller."""
        prepared = []
        for entry in entries:
            # daprd merges the request's metadata only into entries that have their own
            entry_metadata = {**metadata, **entry.metadata} if entry.metadata else {}
            prepared.append((entry.entry_id, *((entry.data, entry.content_type) if raw else
                             self.envelope(topic, entry.data, entry.content_type,
                                           entry_metadata, trace))))
        results = await asyncio.gather(
            *(self._send(topic, data, kind) for _, data, kind in prepared),
            return_exceptions=True)
        failed = []
        for (entry_id, _, _), result in zip(prepared, results, strict=True):
            if isinstance(result, BaseException):
                failed.append((entry_id, str(result)))
        return failed

    async def _send(self, topic: str, data: bytes, content_type: str) -> None:
        try:
            await self.sink.publish(topic, data, content_type)
        except DriverError as exc:
            log.warning("publish failed", topic=topic, error=str(exc))
            raise errors.publish_failed(self.pubsub_name, topic, str(exc)) from None


def require_unique_ids(service: PublishService, topic: str, ids: Sequence[str]) -> None:
    """daprd refuses a bulk request whose entry ids are missing or repeated."""
    seen: set[str] = set()
    for entry_id in ids:
        if not entry_id or entry_id in seen:
            raise errors.marshal_events(service.pubsub_name, topic, service.app_id,
                                        "entryId is duplicated or not present for entry")
        seen.add(entry_id)


def first_values(pairs: Any, prefix: str = "metadata.") -> dict[str, str]:
    """daprd's ``getMetadataFromRequest``: ``metadata.<key>`` query parameters, first value."""
    found: dict[str, str] = {}
    for key, value in pairs:
        if key.startswith(prefix) and key[len(prefix):] not in found:
            found[key[len(prefix):]] = value
    return found
