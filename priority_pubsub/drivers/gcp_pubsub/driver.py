"""The Google Cloud Pub/Sub driver (gapic asyncio, unary pull): consume and settle.

What it does for an operator (credentials, dead-letter policies and attempt counts, leases,
dead letters, idle cost, kill -9, the emulator's retry policies, no depth) is
docs/brokers/gcp_pubsub.md. The code follows from what Pub/Sub does:

- Streaming pull leases messages no worker can start: each ``receive`` is one unary pull of
  at most the free slots, on grpc.aio (a waiting pull holds no thread).
- A pull in flight may already hold messages, and cancelling it drops them: a cancelled
  receive leaves it parked for the next receive of that subscription (``drivers.parking``),
  and what it brings with nobody waiting is nacked at once; the driver says only how to pull
  and how to nack.
- Pub/Sub accepts an ack for an expired ack id: the driver refuses a settle past the lease
  deadline it tracks (``LeaseLost``), and maps an exactly-once subscription's refusal to the
  same.
- Attempts exist only where the subscription has a dead-letter policy; counting in memory
  would reset with every restart and differ between replicas, so it is not done.
- Settles are grouped through a ``MicroBatcher``; a grouped call that fails is repeated per
  id, so each message gets its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import gapic_v1, grpc_helpers_async
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.pubsub_v1 import PublisherAsyncClient, SubscriberAsyncClient
from google.pubsub_v1.types import PubsubMessage, PullRequest, PullResponse, ReceivedMessage

from priority_pubsub.core.errors import DriverError, MessageTooLarge
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    CONTENT_TYPE_ATTRIBUTE,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DriverContext,
    DriverKit,
    DriverOptions,
    check_options,
    live_token,
    map_errors,
)
from priority_pubsub.drivers.batching import MicroBatcher
from priority_pubsub.drivers.gcp_pubsub.names import (
    EMULATOR_RETRY_POLICY_BUG,
    is_path,
    map_error,
    on_emulator,
    resource_path,
)
from priority_pubsub.drivers.gcp_pubsub.options import MAX_ACK_DEADLINE_S, PubSubOptions
from priority_pubsub.drivers.parking import Call, ParkedReceive
from priority_pubsub.telemetry.logs import get_logger

log = get_logger(__name__)
T = TypeVar("T")

# api_core's helpers carry no annotations; typed aliases keep the calls below checked.
_wrap_errors: Callable[[Any], Callable[..., Any]] = grpc_helpers_async.wrap_errors
_routing_metadata: Callable[[Any], tuple[str, str]] = gapic_v1.routing_header.to_grpc_metadata

MAX_PULL_MESSAGES = 1000
MAX_SETTLE_IDS = 100
"""Ack ids per grouped acknowledge / modify_ack_deadline (Pub/Sub takes up to 2,500)."""
MAX_MESSAGE_BYTES = 10_000_000
PULL_DEADLINE_MARGIN_S = 1.0
"""The broker answers an empty long pull ~1 s before the gRPC deadline; give it that second."""
LEASE_SAFETY_MS = 1000
"""Without our own modify_ack_deadline the lease started when the broker sent the batch,
somewhat before we read it: count the deadline from 1 s earlier, to refuse rather than risk."""
EXTEND_GRACE_MS = 500
"""An extension this late is still sent: our deadline counts from when we sent the request
(the broker's from when it handled it), and the message can only have gone elsewhere if
another consumer pulled in that very half second. Acks get no grace: they would delete."""
_sdk_errors = functools.partial(
    map_errors, map_error, catch=(gexc.GoogleAPICallError, gexc.RetryError)
)
"""``with _sdk_errors(doing):`` around an SDK call: its errors come out as ``map_error`` says."""


@dataclass(slots=True)
class _Subscription:
    name: str
    path: str
    topic: str
    ack_deadline_s: int
    policy_dead_letter_topic: str | None
    metadata: tuple[tuple[str, str], ...] = ()
    retry_policy: bool = False


def _patience(call: Call[Message], wait_s: float, own: bool) -> float | None:
    """A waiting receive waits for its pull a little past its own deadline (a new pull ends
    by then; an adopted one may outlast it and stays parked); one that must answer at once
    waits for its pull's answer (``call_timeout_s`` bounds it)."""
    return wait_s + PULL_DEADLINE_MARGIN_S + 0.5 if wait_s > 0 else None


class PubSubDriver(DriverKit[PubSubOptions],
                   name="gcp_pubsub", options_model=PubSubOptions,
                   releases_count_as_attempts=True):
    """Consumes Pub/Sub subscriptions; see the module docstring for the guarantees.

    Releases count as attempts: a nacked message comes back with ``delivery_attempt`` raised;
    nothing lowers it."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        super().__init__(options, context)
        options = self.options
        check_options(options, context)
        self.project = options.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
        self.lease_s = max(1, math.ceil(context.lease_duration_s))
        self.pull_calls = 0
        """Pull RPCs made so far (tests and benchmarks read it to measure idle cost)."""
        self._subscriber: SubscriberAsyncClient | None = None
        self._publisher: PublisherAsyncClient | None = None
        self._subs: dict[str, _Subscription] = {}
        self._topics: dict[str, str] = {}
        self._dead_letter_topic: str | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._parking: ParkedReceive[Message] = ParkedReceive(
            self._pull_once, self._nack_later, _patience)
        """The pulls a cancelled receive left running (the module docstring says why)."""
        self.calls: Counter[str] = Counter()
        """Settle RPCs made, by method (acknowledge, modify_ack_deadline)."""
        # settles grouped per subscription (and deadline), as the module docstring says
        self._acks: MicroBatcher[str, str] = MicroBatcher(self._send_acks, MAX_SETTLE_IDS)
        self._modacks: MicroBatcher[tuple[str, int], str] = MicroBatcher(
            self._send_modacks, MAX_SETTLE_IDS
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        endpoint = self.options.endpoint
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None
        try:
            if self._subscriber is None:  # start() is retried while Pub/Sub is unreachable
                self._subscriber = SubscriberAsyncClient(client_options=options)
                self._publisher = PublisherAsyncClient(client_options=options)
        except auth_exceptions.GoogleAuthError as exc:
            raise DriverError(f"pub/sub credentials: {exc}", retriable=False) from exc
        if self.context.dead_letter_queue:
            self._dead_letter_topic = resource_path(
                self.context.dead_letter_queue, "topics", self.project
            )
        for queue in self.context.queues:
            self._subs[queue] = await self._resolve(queue)
        without = [s.name for s in self._subs.values() if not s.policy_dead_letter_topic]
        if without:
            log.warning(
                "pub/sub subscriptions without a dead-letter policy report no delivery "
                "attempts: every delivery counts as attempt 1, retry.max_attempts is not "
                "enforced", subscriptions=without,
            )
        if on_emulator() and (retrying := [s.name for s in self._subs.values() if s.retry_policy]):
            log.warning(f"{EMULATOR_RETRY_POLICY_BUG}; remove it (provision --update does)",
                        subscriptions=retrying)

    async def close(self) -> None:
        await self._parking.close(None)  # each ends by its own deadline; what it brings is nacked
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.options.call_timeout_s)
        await self._acks.drain(self.options.call_timeout_s)
        await self._modacks.drain(self.options.call_timeout_s)
        for client in (self._subscriber, self._publisher):
            if client is not None:
                close: Callable[[], Awaitable[None]] = client.transport.close
                with contextlib.suppress(Exception):
                    await close()
        self._subscriber = self._publisher = None

    @property
    def dead_letter_enabled(self) -> bool:
        if self._dead_letter_topic:
            return True
        return bool(self._subs) and all(s.policy_dead_letter_topic for s in self._subs.values())

    async def _resolve(self, queue: str) -> _Subscription:
        path = resource_path(queue, "subscriptions", self.project)
        found = await self._call(
            "get_subscription", self._sub.get_subscription(subscription=path, retry=None,
                                                          timeout=self.options.call_timeout_s)
        )
        policy = found.dead_letter_policy.dead_letter_topic or None
        routing = _routing_metadata((("subscription", path),))
        return _Subscription(queue, path, found.topic, found.ack_deadline_seconds, policy,
                             (routing,), retry_policy="retry_policy" in found)

    # -- consuming -------------------------------------------------------------------------

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        sub = self._subscription(queue)
        if max_messages <= 0:
            return []
        count = min(max_messages, MAX_PULL_MESSAGES)
        remaining = max(0.0, wait_s)
        deadline = time.monotonic() + remaining
        while True:
            keep = await self._parking.receive(queue, count, remaining)
            remaining = deadline - time.monotonic()
            # Pub/Sub may answer a long pull empty before our deadline: ask again till then.
            if keep or remaining < 0.2:
                break
        if keep and self.lease_s != sub.ack_deadline_s:
            relisting = asyncio.ensure_future(self._relist(sub, keep))
            try:
                await asyncio.shield(relisting)
            except asyncio.CancelledError:
                relisting.add_done_callback(lambda _: self._nack_later(queue, keep))
                raise
        return keep

    async def _pull_once(self, queue: str, count: int, wait_s: float) -> list[Message]:
        """One pull (the parked receive's broker call): never cancelled once sent."""
        sub = self._subscription(queue)
        request = PullRequest(subscription=sub.path, max_messages=count,
                              return_immediately=wait_s <= 0)
        timeout = wait_s + PULL_DEADLINE_MARGIN_S if wait_s > 0 else self.options.call_timeout_s
        self.pull_calls += 1
        number = self.pull_calls
        log.debug("pubsub pull", queue=sub.name, pull=number, count=count, wait_s=wait_s)
        try:
            with _sdk_errors(f"pull {sub.name}"):
                response: PullResponse = await _wrap_errors(self._sub.transport.pull)(
                    request, timeout=timeout, metadata=sub.metadata
                )
        except DriverError as exc:
            log.debug("pubsub pull ended", queue=sub.name, pull=number, error=str(exc))
            if wait_s > 0 and isinstance(exc.__cause__, gexc.DeadlineExceeded):
                return []  # the broker had nothing before our deadline: an empty answer
            raise
        received_ms = now_ms()
        messages = [self._message(sub, item, received_ms) for item in response.received_messages]
        if messages:  # the wire trace: which ack id each delivery got (a lost message's story)
            log.debug("pubsub pulled", queue=sub.name, pull=number,
                      deliveries=[[m.id, m.attempt, m.lease.token] for m in messages])
        return messages

    async def _relist(self, sub: _Subscription, messages: list[Message]) -> None:
        """Re-lease a fresh batch to ``lease.duration_s`` (differs from the subscription's)."""
        started = now_ms()
        try:
            await self._modack(sub, [m.lease.token for m in messages], self.lease_s)
        except DriverError as exc:  # they keep the subscription's deadline; still ours
            log.warning("re-leasing a pulled batch failed", queue=sub.name, error=str(exc))
            return
        for message in messages:
            message.lease.deadline_ms = started + self.lease_s * 1000

    def _message(self, sub: _Subscription, item: ReceivedMessage, received_ms: int) -> Message:
        raw = PubsubMessage.pb(item.message)
        attributes = dict(raw.attributes)
        content_type = attributes.pop(CONTENT_TYPE_ATTRIBUTE, None)
        deadline = received_ms - LEASE_SAFETY_MS + sub.ack_deadline_s * 1000
        return Message(
            id=raw.message_id,
            queue=sub.name,
            priority=self.context.priority_of(sub.name),
            body=raw.data,
            attributes=attributes,
            attempt=max(1, item.delivery_attempt),
            enqueued_ms=raw.publish_time.ToMilliseconds(),
            lease=Lease(token=item.ack_id, deadline_ms=deadline),
            content_type=content_type,
            received_ms=received_ms,
        )

    def _nack_later(self, queue: str, messages: list[Message]) -> None:
        """Hand ``messages`` back at once (ack deadline 0), in the background: no receive
        took them (the parked receive's ``release``); ``close`` waits for it."""
        if ids := [m.lease.token for m in messages]:
            task = asyncio.ensure_future(self._nack_quietly(self._subscription(queue), ids))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _nack_quietly(self, sub: _Subscription, ack_ids: list[str]) -> None:
        try:
            await self._modack(sub, ack_ids, 0)
        except DriverError as exc:  # they return when their lease ends instead
            log.warning("returning messages no receive took failed",
                        queue=sub.name, count=len(ack_ids), error=str(exc))

    # -- settling --------------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        sub = self._live(message, "ack")
        await self._acks.submit(sub.path, message.lease.token)

    async def retry(self, message: Message, delay_s: float) -> None:
        sub = self._live(message, "retry")
        delay = 0 if delay_s <= 0 else min(MAX_ACK_DEADLINE_S, math.ceil(delay_s))
        await self._modacks.submit((sub.path, delay), message.lease.token)
        message.lease.deadline_ms = now_ms()  # no longer ours once returned

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """As ``retry``: Pub/Sub counts the delivery (``releases_count_as_attempts``)."""
        await self.retry(message, delay_s)

    async def extend(self, message: Message, duration_s: float) -> None:
        sub = self._live(message, "extend", grace_ms=EXTEND_GRACE_MS)
        seconds = max(1, min(MAX_ACK_DEADLINE_S, math.ceil(duration_s)))
        started = now_ms()
        await self._modacks.submit((sub.path, seconds), message.lease.token)
        message.lease.deadline_ms = started + seconds * 1000

    async def dead_letter(self, message: Message, reason: str) -> None:
        sub = self._live(message, "dead-letter")
        topic = self._dead_letter_topic or sub.policy_dead_letter_topic
        if topic is None:
            raise DriverError(f"no dead-letter topic for {message.queue}", retriable=False)
        attributes = {**message.attributes, DEAD_LETTER_REASON: reason,
                      DEAD_LETTER_SOURCE: message.queue}
        if message.content_type:
            attributes[CONTENT_TYPE_ATTRIBUTE] = message.content_type
        await self._publish_to(topic, message.body, attributes)
        await self.ack(message)

    def _live(self, message: Message, verb: str, grace_ms: int = 0) -> _Subscription:
        """The message's subscription, if its lease still runs: else refuse with LeaseLost."""
        sub = self._subscription(message.queue)
        live_token(message, str, verb, grace_ms=grace_ms)
        return sub

    async def _modack(self, sub: _Subscription, ack_ids: list[str], seconds: int) -> None:
        await self._modack_path(sub.path, ack_ids, seconds)

    async def _modack_path(self, path: str, ack_ids: Sequence[str], seconds: int) -> None:
        self.calls["modify_ack_deadline"] += 1
        log.debug("pubsub modify_ack_deadline", subscription=path, seconds=seconds,
                  ack_ids=list(ack_ids))
        await self._call("modify_ack_deadline", self._sub.modify_ack_deadline(
            subscription=path, ack_ids=list(ack_ids), ack_deadline_seconds=seconds,
            timeout=self.options.call_timeout_s), settling=True)

    async def _acknowledge(self, path: str, ack_ids: Sequence[str]) -> None:
        self.calls["acknowledge"] += 1
        log.debug("pubsub acknowledge", subscription=path, ack_ids=list(ack_ids))
        await self._call("ack", self._sub.acknowledge(
            subscription=path, ack_ids=list(ack_ids), timeout=self.options.call_timeout_s),
            settling=True)

    async def _send_acks(self, path: str, ack_ids: Sequence[str]) -> list[BaseException | None]:
        return await _each_on_failure(ack_ids, lambda ids: self._acknowledge(path, ids))

    async def _send_modacks(
        self, key: tuple[str, int], ack_ids: Sequence[str]
    ) -> list[BaseException | None]:
        path, seconds = key
        return await _each_on_failure(ack_ids, lambda ids: self._modack_path(path, ids, seconds))

    # -- optional abilities ----------------------------------------------------------------

    async def publish(self, queue: str, body: bytes, attributes: Mapping[str, str] | None = None,
                      content_type: str | None = None) -> str:
        """Publish to the topic behind subscription ``queue``, or to topic ``queue``."""
        named = dict(attributes or {})
        if content_type:
            named[CONTENT_TYPE_ATTRIBUTE] = content_type
        return await self._publish_to(await self._topic_for(queue), body, named)

    async def ping(self) -> None:
        first = self._subscription(self.context.queues[0])
        await self._call("ping", self._sub.get_subscription(
            subscription=first.path, retry=None, timeout=min(5.0, self.options.call_timeout_s)))

    async def _topic_for(self, queue: str) -> str:
        if queue in self._subs:
            return self._subs[queue].topic
        if is_path(queue, "topics"):
            return queue
        if queue not in self._topics:
            try:
                self._topics[queue] = (await self._resolve(queue)).topic
            except DriverError:  # not a subscription we can see: a topic id
                self._topics[queue] = resource_path(queue, "topics", self.project)
        return self._topics[queue]

    async def _publish_to(self, topic: str, body: bytes, attributes: dict[str, str]) -> str:
        if len(body) > MAX_MESSAGE_BYTES:
            raise MessageTooLarge(f"{len(body)} bytes exceeds Pub/Sub's {MAX_MESSAGE_BYTES}")
        assert self._publisher is not None, "start() first"
        response = await self._call("publish", self._publisher.publish(
            topic=topic, messages=[PubsubMessage(data=body, attributes=attributes)],
            timeout=self.options.call_timeout_s))
        return str(response.message_ids[0])

    # -- plumbing --------------------------------------------------------------------------

    @property
    def _sub(self) -> SubscriberAsyncClient:
        assert self._subscriber is not None, "start() first"
        return self._subscriber

    def _subscription(self, queue: str) -> _Subscription:
        try:
            return self._subs[queue]
        except KeyError:
            raise DriverError(f"{queue!r} is not a configured queue", retriable=False) from None

    async def _call(self, doing: str, call: Awaitable[T], *, settling: bool = False) -> T:
        with _sdk_errors(doing, settling=settling):
            return await call


async def _each_on_failure(
    ack_ids: Sequence[str], call: Callable[[Sequence[str]], Awaitable[None]]
) -> list[BaseException | None]:
    """One call for all ``ack_ids``; if it fails and carried several, one call per id, so
    each message gets its own answer (a refused id fails alone; the others are settled).
    Acknowledging or re-setting a deadline twice is harmless, so the repeat cannot hurt."""
    try:
        await call(ack_ids)
        return [None] * len(ack_ids)
    except DriverError as exc:
        if len(ack_ids) == 1:
            return [exc]
    results: list[BaseException | None] = []
    for ack_id in ack_ids:
        try:
            await call([ack_id])
            results.append(None)
        except DriverError as exc:
            results.append(exc)
    return results
