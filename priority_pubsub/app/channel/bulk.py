"""Bulk subscriptions (``bulkSubscribe`` in a Subscription or ``/dapr/subscribe``): several
messages of one topic in one request, as daprd delivers them.

Sources: dapr ``pkg/runtime/pubsub/bulksubscribe.go`` (``NewBulkSubscribeEnvelope``: ``id``,
``entries`` of ``entryId``/``event``/``metadata``/``contentType``, ``metadata``, ``topic``,
``pubsubname``, ``type`` ``com.dapr.event.sent.bulk``), ``pkg/runtime/subscription/postman/
http/http.go`` (``DeliverBulk``: a 2xx answer's ``statuses`` settle each entry, SUCCESS and
DROP done, RETRY, "" and unknown retried, an entry missing from the answer retried; 404
drops every entry; any other status retries every entry) and ``postman/grpc/grpc.go``
(``OnBulkTopicEventAlpha1``, the same rules).

Capacity stays one message = one worker: each message's own worker task hands its prepared
request to ``BulkChannel.deliver`` and awaits its entry's outcome, so a batch of n entries
holds n workers, and lease keeping, retries, dead letters and the journal stay per message.
A batch (per topic and route) is sent when it holds ``maxMessagesCount`` entries, when no
worker is free to add another (the receiver has no room: waiting could not fill it), or
``maxAwaitDurationMs`` after its first entry (whichever comes first; the messages of one
take join their batch before it goes). The receiver takes highest priority first, so
a freed worker goes to a higher topic's batch before a lower one's, and a batch never waits
on another topic. A delivery cut short (its timeout: ``delivery.cancel``) leaves its batch;
a sent batch that every entry has left is cancelled. An entry that leaves before its batch
was sent raises ``NeverSent``: a stop hands its message back unseen, uncounted.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from priority_pubsub.app.request import AppChannel, NeverSent, Prepared
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.telemetry.logs import get_logger

log = get_logger("priority_pubsub.delivery")
BULK_EVENT_TYPE = "com.dapr.event.sent.bulk"
CLOUDEVENT_CONTENT_TYPE = "application/cloudevents+json"
RAW_CONTENT_TYPE = "application/octet-stream"
DAPRD_MAX_MESSAGES = 100
DAPRD_MAX_AWAIT_MS = 1000
"""daprd's defaults for ``maxMessagesCount`` and ``maxAwaitDurationMs``."""
_NOT_METADATA = frozenset({"content-type", "dapr-api-token", "traceparent", "tracestate"})
_SIBLING_TURNS = 3
"""Loop turns a batch with no free worker waits for the rest of its take to join it."""
_MISSING = "response not received, RETRY required while processing bulk subscribe event"


@dataclass(frozen=True, slots=True)
class BulkSettings:
    max_messages: int = DAPRD_MAX_MESSAGES
    max_await_s: float = DAPRD_MAX_AWAIT_MS / 1000


@dataclass(slots=True)
class Entry:
    entry_id: str
    prepared: Prepared
    answer: asyncio.Future[Outcome]
    left: bool = False
    """Its worker stopped waiting (a cancelled delivery) after the batch was sent."""

    def http_entry(self) -> dict[str, Any]:
        """daprd's ``BulkSubscribeMessageItem``: the CloudEvent, or with ``rawPayload`` the
        data as published in base64; ``contentType`` the component's, else
        ``application/cloudevents+json`` / ``application/octet-stream``
        (``bulksubscription.go`` ``bulkSubscribeTopic``)."""
        prepared = self.prepared
        if prepared.raw is not None:
            return {"entryId": self.entry_id,
                    "event": base64.b64encode(prepared.raw).decode("ascii"),
                    "metadata": self.metadata or None,
                    "contentType": prepared.content_type or RAW_CONTENT_TYPE}
        return {"entryId": self.entry_id, "event": prepared.request.event,
                "metadata": self.metadata or None,
                "contentType": prepared.content_type or CLOUDEVENT_CONTENT_TYPE}

    @property
    def metadata(self) -> dict[str, str]:
        """The message's metadata (its headers in a single delivery)."""
        return {k: v for k, v in self.prepared.request.headers.items()
                if k.lower() not in _NOT_METADATA}


@dataclass(slots=True)
class Batch:
    """Entries of one topic and route, sent together."""

    pubsub: str
    topic: str
    path: str
    url: str
    entries: list[Entry] = field(default_factory=list)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    sending: asyncio.Task[None] | None = None
    """The request carrying it, once sent."""

    def envelope(self) -> dict[str, Any]:
        """The HTTP body daprd posts (``NewBulkSubscribeEnvelope``)."""
        return {
            "entries": [e.http_entry() for e in self.entries],
            "id": self.id,
            "metadata": {"pubsubName": self.pubsub},
            "pubsubname": self.pubsub,
            "topic": self.topic,
            "type": BULK_EVENT_TYPE,
        }


class BulkTransport(Protocol):
    async def deliver_bulk(self, batch: Batch) -> dict[str, Outcome] | Outcome:
        """Each entry's outcome by entry id (missing: retried), or one outcome for all."""
        ...


def entry_outcome(status: str, entry_id: str, http_status: int | None = None) -> Outcome:
    """One entry's status as daprd reads it (exact words: daprd compares them exactly)."""
    if status == "SUCCESS":
        return Outcome.ack(http_status)
    if status == "DROP":
        return Outcome.drop("app answered DROP for the entry", http_status)
    if status in ("", "RETRY"):
        return Outcome.retry(f"RETRY required while processing bulk subscribe event for entry "
                             f"id: {entry_id}", http_status)
    return Outcome.retry(f"unknown status returned from app while processing bulk subscribe "
                         f"event {entry_id}: {status[:40]}", http_status)


class BulkChannel:
    """An ``AppChannel``: a prepared request of a bulk topic waits in its topic's batch; any
    other goes to the inner channel as it is."""

    def __init__(self, inner: AppChannel, transport: BulkTransport,
                 topics: Mapping[str, BulkSettings], has_room: Callable[[], bool]) -> None:
        self._inner = inner
        self._transport = transport
        self._topics = topics
        self._has_room = has_room
        self._filling: dict[tuple[str, str], Batch] = {}
        self._timers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self._inner.start()

    async def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        await self._inner.close()

    async def deliver(self, prepared: Prepared) -> Outcome:
        target = prepared.target
        settings = self._topics.get(target.topic) if target is not None else None
        if target is None or settings is None:
            return await self._inner.deliver(prepared)
        key = (target.topic, target.path)
        batch = self._filling.get(key)
        if batch is None:
            batch = self._filling[key] = Batch(target.pubsub_name, target.topic, target.path,
                                               prepared.url)
            self._start_timer(key, batch, settings.max_await_s)
        entry = Entry(str(uuid.uuid4()), prepared,
                      asyncio.get_running_loop().create_future())
        batch.entries.append(entry)
        if len(batch.entries) >= settings.max_messages:
            self._send(key, batch)
        elif not self._has_room():
            self._send_unless_joined(key, batch)
        try:
            return await asyncio.shield(entry.answer)
        except asyncio.CancelledError:
            if self._leave(key, batch, entry):
                raise NeverSent from None
            raise

    def _leave(self, key: tuple[str, str], batch: Batch, entry: Entry) -> bool:
        """A cancelled delivery's entry leaves its batch: not sent yet, the app never sees
        it (True: its worker hands the message back unseen, ``NeverSent``); sent, the
        batch's request is cancelled once every entry has left (nobody waits for its answer:
        the app sees it cancelled, as a single delivery's)."""
        if self._filling.get(key) is batch:
            if entry in batch.entries:
                batch.entries.remove(entry)
            return True
        entry.left = True
        if batch.sending is not None and all(e.left for e in batch.entries):
            batch.sending.cancel()
        return False

    def _send_unless_joined(self, key: tuple[str, str], batch: Batch) -> None:
        """No worker is free to bring another entry: send, but only once the messages taken
        together with this one (their tasks are already scheduled) have had their turn to
        join; sent at once, a take of n messages would go out as n batches of one."""
        async def send_after_siblings() -> None:
            for _ in range(_SIBLING_TURNS):
                await asyncio.sleep(0)
            if self._filling.get(key) is batch and not self._has_room():
                self._send(key, batch)

        task = asyncio.create_task(send_after_siblings(), name=f"bulk-{batch.topic}-full")
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def _start_timer(self, key: tuple[str, str], batch: Batch, wait_s: float) -> None:
        async def send_when_due() -> None:
            await asyncio.sleep(wait_s)
            if self._filling.get(key) is batch:
                self._send(key, batch)

        timer = asyncio.create_task(send_when_due(), name=f"bulk-{batch.topic}")
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    def _send(self, key: tuple[str, str], batch: Batch) -> None:
        del self._filling[key]
        if not batch.entries:
            return
        task = batch.sending = asyncio.create_task(self._exchange(batch),
                                                   name=f"bulk-send-{batch.topic}")
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    async def _exchange(self, batch: Batch) -> None:
        try:
            answered = await self._transport.deliver_bulk(batch)
        except Exception as exc:  # a bug must not leave the workers waiting forever
            log.exception("bulk delivery failed", topic=batch.topic)
            answered = Outcome.retry(f"internal error: {type(exc).__name__}: {exc}"[:300])
        for entry in batch.entries:
            if entry.answer.done():
                continue
            if isinstance(answered, Outcome):
                entry.answer.set_result(answered)
            else:
                entry.answer.set_result(answered.get(entry.entry_id) or Outcome.retry(
                    f"{_MISSING} for entry id: {entry.entry_id}"))
