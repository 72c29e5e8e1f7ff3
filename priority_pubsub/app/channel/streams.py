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
allows). A topic with no open stream is not received from (``StreamHub.idle``): its messages
wait in the broker, not in the sidecar.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from priority_pubsub.app.channel.envelope import EnvelopeError, topic_event_request
from priority_pubsub.app.request import Prepared
from priority_pubsub.core.outcome import Outcome
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from dapr.proto.runtime.v1.appcallback_pb2 import TopicEventRequest

log = get_logger("priority_pubsub.delivery")
STREAM_CLOSED = "stream closed before answering: returned unseen"
NO_STREAM = "no stream subscribed to the topic: returned unseen"


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

    def __init__(self, pubsub_name: str, queues: Mapping[str, str]) -> None:
        self.pubsub_name = pubsub_name
        self.queues = dict(queues)
        """Topic -> the queue its messages are received from (the topics streams may take)."""
        self._streams: dict[str, list[Stream]] = {topic: [] for topic in queues}
        self._changed = asyncio.Event()
        self._turn = itertools.count()

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

    def idle(self) -> frozenset[str]:
        """The queues no stream takes from now (the receiver leaves them alone)."""
        return frozenset(queue for topic, queue in self.queues.items()
                         if not self._streams[topic])

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
