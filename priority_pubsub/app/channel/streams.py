"""Streaming subscriptions (``SubscribeTopicEventsAlpha1``): the app is a gRPC *client* of
the sidecar and takes a topic's events on a stream it opened, answering each on the same
stream (python-sdk ``client.subscribe``/``subscribe_with_handler``).

Source: dapr ``pkg/runtime/subscription/postman/streaming/streaming.go`` (each event sent as a
``TopicEventRequest`` and answered by an ``event_processed`` with its id and SUCCESS, RETRY or
DROP) and ``pkg/api/grpc/subscribe.go`` (the initial request, then ``initial_response``).

A stream is an app channel for its topic: the worker that took a message delivers it to one
of the topic's open streams and waits for the answer, so an unanswered event holds a worker
(it counts against ``concurrency``), its lease is kept, and retries, dead letters and the
journal apply as to pushed deliveries. Two streams on one topic share its messages (each
message to the stream with the fewest unanswered, as competing consumers). A closed stream's
unanswered messages are released at once (handed back unseen, not counted where the broker
allows). A topic with no open stream is not received from (``StreamHub.taken``): its messages
wait in the broker, not in the sidecar.

A stream on a topic unknown at start (``StreamHub.add_topic``) gets its queue made as its
component (Dapr mode) or driver (native mode) makes queues (``make_queue``, set by whoever
knows how), added below the known ones: it is the lowest priority. A stream's own
dead-letter topic is where its topic's dropped messages and those out of retries go
(``dead_letter_topic``: as daprd's ``sendToDeadLetter``); ``StreamDeadLetters`` does it in
native mode, where topics are queues.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from priority_pubsub.app.channel.envelope import EnvelopeError, topic_event_request
from priority_pubsub.app.request import Prepared
from priority_pubsub.core.errors import DriverError
from priority_pubsub.core.message import Message
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.drivers.base import Driver, Publisher
from priority_pubsub.drivers.dead_letter_topics import DeadLetterTopicDriver
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventRequest

log = get_logger("priority_pubsub.delivery")
STREAM_CLOSED = "stream closed before answering: returned unseen"
NO_STREAM = "no stream subscribed to the topic: returned unseen"
QueueMaker = Callable[[str], Awaitable[str]]
"""Makes (or finds) the queue of a topic unknown at start and adds it to the running
sidecar; returns its name, raises ``TopicRefused``."""


class TopicRefused(Exception):
    """A stream's topic that cannot be served here: ``code`` is the gRPC status's name."""

    def __init__(self, message: str, code: str = "NOT_FOUND") -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class Stream:
    """One open ``SubscribeTopicEventsAlpha1`` call: what to send it, what it owes."""

    topic: str
    dead_letter_topic: str = ""
    outgoing: asyncio.Queue[TopicEventRequest | None] = field(default_factory=asyncio.Queue)
    unanswered: dict[str, asyncio.Future[Outcome]] = field(default_factory=dict)
    closed: bool = False

    async def deliver(self, prepared: Prepared) -> Outcome:
        try:
            request = topic_event_request(prepared)
        except EnvelopeError as exc:
            return Outcome.retry(f"error returned from app while processing pub/sub event: {exc}")
        if self.closed:
            return Outcome.release(STREAM_CLOSED)
        if request.id in self.unanswered:  # answers name the event by id: one at a time
            return Outcome.release(f"an event with id {request.id[:80]} is unanswered on the "
                                   "stream: returned unseen")
        answer: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.unanswered[request.id] = answer
        self.outgoing.put_nowait(request)
        try:
            return await answer
        finally:
            self.unanswered.pop(request.id, None)

    def answer(self, event_id: str, outcome: Outcome) -> bool:
        """The app's answer to one event; False when the stream owes no such event."""
        waiting = self.unanswered.get(event_id)
        if waiting is None or waiting.done():
            return False
        waiting.set_result(outcome)
        return True

    def close(self) -> None:
        """The app went: what it did not answer goes back at once."""
        self.closed = True
        for waiting in self.unanswered.values():
            if not waiting.done():
                waiting.set_result(Outcome.release(STREAM_CLOSED))
        self.outgoing.put_nowait(None)


class StreamHub:
    """The open streams by topic, shared by the gRPC API (which opens and closes them) and
    the sidecar (which delivers to them and receives only from topics that have one)."""

    def __init__(self, pubsub_name: str, queues: Mapping[str, str],
                 make_queue: QueueMaker | None = None) -> None:
        self.pubsub_name = pubsub_name
        self.queues = dict(queues)
        """Topic -> the queue its messages are received from (the topics streams may take)."""
        self.make_queue = make_queue
        """How a topic unknown at start gets its queue (None: such a stream is refused)."""
        self._streams: dict[str, list[Stream]] = {topic: [] for topic in queues}
        self._changed = asyncio.Event()
        self._turn = itertools.count()
        self._adding = asyncio.Lock()

    async def add_topic(self, topic: str) -> None:
        """Make a topic unknown at start streamable: its queue made (``make_queue``) and
        received from, below the known ones. Raises ``TopicRefused``."""
        async with self._adding:  # two streams on one new topic: one queue
            if topic in self.queues:
                return
            if self.make_queue is None:
                raise TopicRefused(f"topic {topic} has no queue on this sidecar (streamed "
                                   f"topics: {sorted(self.queues)})")
            queue = await self.make_queue(topic)
            self.queues[topic] = queue
            self._streams[topic] = []
            log.info("stream topic added", topic=topic, queue=queue,
                     priority="lowest: after the topics known at start")

    def dead_letter_topic(self, topic: str) -> str | None:
        """The dead-letter topic of the streams open on ``topic`` (the latest opened that
        names one), or None."""
        for stream in reversed(self._streams.get(topic, [])):
            if stream.dead_letter_topic:
                return stream.dead_letter_topic
        return None

    def topic_of(self, queue: str) -> str | None:
        """The streamed topic received from ``queue`` (one topic per queue), or None."""
        found = [topic for topic, name in self.queues.items() if name == queue]
        return found[0] if len(found) == 1 else None

    def open(self, topic: str, dead_letter_topic: str = "") -> Stream:
        stream = Stream(topic, dead_letter_topic)
        self._streams[topic].append(stream)
        self._notify()
        log.info("stream subscribed", topic=topic, streams=len(self._streams[topic]))
        return stream

    def close(self, stream: Stream) -> None:
        stream.close()
        if stream in self._streams.get(stream.topic, []):
            self._streams[stream.topic].remove(stream)
            self._notify()
            log.info("stream closed", topic=stream.topic, streams=len(self._streams[stream.topic]))

    def streams(self) -> list[Stream]:
        return [stream for streams in self._streams.values() for stream in streams]

    def taken(self) -> frozenset[str]:
        """The queues a stream takes from now (the receiver leaves the others alone, a
        queue being made for a new topic included)."""
        return frozenset(queue for topic, queue in self.queues.items()
                         if self._streams[topic])

    async def changed(self) -> None:
        """Until a stream opens or closes."""
        await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def deliver(self, prepared: Prepared) -> Outcome:
        target = prepared.target
        open_streams = self._streams.get(target.topic, []) if target is not None else []
        if not open_streams:
            return Outcome.release(NO_STREAM)
        turn = next(self._turn)
        # the least busy stream; ties in turn (competing consumers share the topic)
        stream = min(open_streams, key=lambda s: (len(s.unanswered),
                                                  (open_streams.index(s) - turn)
                                                  % len(open_streams)))
        return await stream.deliver(prepared)


class StreamChannel:
    """An ``AppChannel`` delivering a streamed topic's messages to its streams (the sidecar
    of an app without a push endpoint: every topic it takes is a streamed one)."""

    def __init__(self, hub: StreamHub) -> None:
        self._hub = hub

    async def start(self) -> None:
        """Nothing to connect: the app comes to the sidecar."""

    async def close(self) -> None:
        for stream in self._hub.streams():
            self._hub.close(stream)

    async def deliver(self, prepared: Prepared) -> Outcome:
        return await self._hub.deliver(prepared)


class StreamDeadLetters(DeadLetterTopicDriver):
    """Native mode: the driver, with a stream's dead-letter topic honoured as daprd honours
    it (``sendToDeadLetter``): a message its stream dropped, or out of retries, is published
    unchanged to the queue named by the stream's ``dead_letter_topic`` (topics are queues
    here), then acked. Without one, a drop or a dead letter settles as it would without
    streams. Every other verb and ability is the wrapped driver's."""

    name: ClassVar[str] = "stream-dead-letter-topics"

    def __init__(self, driver: Driver, hub: StreamHub) -> None:
        super().__init__(driver)
        self._hub = hub

    async def drop(self, message: Message, reason: str) -> None:
        await self.dead_letter(message, reason)  # as without streams: where dead letters go

    async def _to_topic(self, message: Message, reason: str) -> bool:
        topic = self._hub.topic_of(message.queue)
        target = self._hub.dead_letter_topic(topic) if topic is not None else None
        if target is None:
            return False
        if not isinstance(self._driver, Publisher):
            log.warning("a stream's deadLetterTopic needs a driver that publishes: using the "
                        "driver's dead letters", topic=target, message_id=message.id)
            return False
        try:
            await self._driver.publish(target, message.body, message.attributes,
                                       message.content_type)
        except DriverError as exc:  # retried by the settle loop
            raise DriverError(f"publish to dead-letter topic {target} failed: {exc}",
                              retriable=True) from exc
        log.info("sent to the stream's dead-letter topic", topic=target,
                 message_id=message.id, queue=message.queue, reason=reason)
        await self._driver.ack(message)
        return True
