"""The AWS SQS driver (boto3 in worker threads), compatible with Dapr's
``pubsub.aws.snssqs``: consume and settle.

What it does for an operator (credentials, queue URLs, RedrivePolicy margins, dead letters,
idle cost, short polls, shutdown) is docs/brokers/sqs.md. The code follows from three facts
of SQS and boto3:

- SQS may accept a stale receipt handle and delete a message someone else now holds: the
  lease deadline is a local estimate and a settle past it raises ``LeaseLost`` without
  calling SQS (``extend`` alone is still tried up to 1 s late). Visibility is capped at 12 h
  from the receive: ``extend`` and ``retry`` clamp to what is left.
- A boto3 call cannot be interrupted: a cancelled long poll keeps running in its thread and
  is parked for the next ``receive`` of that queue (``drivers.parking``); what it catches
  with nobody waiting is released at once (visibility 0). A short poll is never parked:
  adopted, it would end a long wait early.
- Every call costs: settles go through a ``MicroBatcher`` per queue URL (sent at once when
  none of their kind is in flight, else together when it returns, ten at most), and
  ``calls`` counts every API call by action.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from priority_pubsub.core.errors import DriverError, LeaseLost, MessageTooLarge
from priority_pubsub.core.message import Lease, Message, now_ms
from priority_pubsub.drivers.base import (
    CONTENT_TYPE_ATTRIBUTE,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DriverContext,
    DriverKit,
    DriverOptions,
    QueueDepth,
    check_options,
    live_token,
)
from priority_pubsub.drivers.batching import MicroBatcher
from priority_pubsub.drivers.parking import Call, ParkedReceive
from priority_pubsub.drivers.sqs.api import (
    MAX_BATCH,
    MAX_VISIBILITY_S,
    SqsApi,
    string_attributes,
    whole_seconds,
)
from priority_pubsub.drivers.sqs.options import SqsOptions
from priority_pubsub.drivers.sqs.sns import dapr_cloudevent, publish_via_sns
from priority_pubsub.telemetry.logs import get_logger

if TYPE_CHECKING:
    from types_boto3_sqs.type_defs import (
        MessageAttributeValueOutputTypeDef,
        MessageAttributeValueTypeDef,
        MessageTypeDef,
    )

__all__ = [
    "CONTENT_TYPE_ATTRIBUTE",
    "DEAD_LETTER_REASON",
    "DEAD_LETTER_SOURCE",
    "SqsDriver",
    "SqsOptions",
    "SqsReceipt",
    "dapr_cloudevent",
    "publish_via_sns",
]
MAX_ATTRIBUTES = 10
_REASON_CHARS = 1024
_CLOCK_MARGIN_MS = 250  # the visibility clock starts at SQS shortly before we see the answer
_EXTEND_GRACE_MS = 1000
_UNANSWERED_POLL_S = 1.0  # a long poll unanswered this long: nothing was visible meanwhile
"""An extension this late is still asked of SQS: the local deadline is a conservative estimate
and nobody can have received the message yet unless a consumer polled in that very second."""
_VISIBILITY_MARGIN_S = 2  # stay clear of the 12 h total so SQS never refuses an extension

log = get_logger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SqsReceipt:
    """The lease token: what settling needs, plus what dead-lettering must carry over."""

    handle: str
    queue_url: str
    raw_attributes: dict[str, MessageAttributeValueTypeDef]
    group_id: str | None = None


@dataclass(eq=False)
class _Poll:
    """One ReceiveMessage running in a worker thread (a parked one outlives its caller)."""

    queue: str
    url: str
    ends_at: float
    visibility_s: int
    outcome: asyncio.Future[list[Message]]
    answered_ms: int = field(default=0)
    wait_s: int = 0
    """WaitTimeSeconds: >= 1 is a long poll, which asks every server (an empty answer is
    reliable); 0 asks a sample and may miss a few messages."""

    @property
    def started_at(self) -> float:
        """Loop time the poll was sent."""
        return self.ends_at - self.wait_s

    @property
    def proves_empty(self) -> bool:
        """Whether an empty answer (or no answer yet) means no visible message: a long poll
        on a standard queue. On a FIFO queue one also answers empty while its message groups
        are held by messages in flight."""
        return self.wait_s >= 1 and not self.url.endswith(".fifo")


class SqsDriver(DriverKit[SqsOptions],
                name="sqs", options_model=SqsOptions,
                releases_count_as_attempts=True):
    """SQS queues, one per priority; see the module docstring for leases, DLQ and polling.

    Releases count as attempts: a receive raises ApproximateReceiveCount and nothing lowers it
    again."""

    def __init__(self, options: DriverOptions, context: DriverContext) -> None:
        super().__init__(options, context)
        options = self.options
        self.calls: Counter[str] = Counter()
        """API calls made, by action, plus ``released`` (messages returned unseen)."""
        self.depths_from_polls = 0
        """Depths answered from the long polls, without a call (see ``depth``)."""
        self._api = SqsApi(
            region=options.region, endpoint_url=options.endpoint,
            max_connections=options.max_connections,
            connect_timeout_s=options.connect_timeout_s,
            longest_poll_s=max(options.wait_time_s, options.empty_poll_wait_s),
        )
        self._executor: ThreadPoolExecutor | None = None
        self._urls: dict[str, str] = {}
        self._polls: set[_Poll] = set()
        """Polls running in a worker thread (what ``depth`` may answer from)."""
        self._parking: ParkedReceive[Message] = ParkedReceive(
            self._start_poll, self._release_unseen, self._patience, park_quick=False,
            on_adopt=self._count_adopted,
        )
        self._quiet_since: dict[str, float] = {}
        """Queues whose latest long poll came back empty (loop time): see ``depth``."""
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        # settles grouped per queue URL (the module docstring says why)
        self._deletes: MicroBatcher[str, str] = MicroBatcher(self._send_deletes, MAX_BATCH)
        self._visibility: MicroBatcher[str, tuple[str, int]] = MicroBatcher(
            self._send_visibility, MAX_BATCH
        )

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        check_options(self.options, self.context)  # load_config did; a driver built directly
        if self._executor is None:  # start() is retried while SQS is unreachable
            self._executor = ThreadPoolExecutor(
                self.options.max_connections, thread_name_prefix="sqs"
            )
        for name in self.context.queues:
            await self._resolve(name)
        if self.context.dead_letter_queue is not None:
            await self._resolve(self.context.dead_letter_queue)

    async def add_queue(self, queue: str) -> None:
        """A queue not configured at start: it must exist (its URL is looked up)."""
        await self._resolve(queue)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # polls still running release what they catch once they answer
        await self._parking.close(self.options.close_wait_s)
        if self._background:
            await asyncio.wait(set(self._background), timeout=self.options.close_wait_s)
        await self._deletes.drain(self.options.close_wait_s)
        await self._visibility.drain(self.options.close_wait_s)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if not self._polls:  # a poll still running needs the client to release its catch
            self._api.close()

    @property
    def dead_letter_enabled(self) -> bool:
        return self.context.dead_letter_queue is not None

    # -- consuming -------------------------------------------------------------------------

    async def receive(self, queue: str, max_messages: int, wait_s: float) -> list[Message]:
        self._url(queue)
        if max_messages <= 0:
            return []
        return await self._parking.receive(queue, max_messages, wait_s)

    def _start_poll(self, queue: str, max_messages: int, wait_s: float
                    ) -> asyncio.Future[list[Message]]:
        """One ReceiveMessage in a worker thread (the parked receive's broker call)."""
        pool = self._pool()
        loop = asyncio.get_running_loop()
        seconds = self._poll_seconds(wait_s)
        visibility_s = max(1, whole_seconds(self.context.lease_duration_s))
        poll = _Poll(queue, self._url(queue), loop.time() + seconds, visibility_s,
                     loop.create_future(), wait_s=seconds)
        self._polls.add(poll)
        self.calls["ReceiveMessage"] += 1
        pool.submit(self._run_poll, poll, loop, max_messages, seconds)
        return poll.outcome

    def _poll_seconds(self, wait_s: float) -> int:
        """WaitTimeSeconds of a receive's poll: its wait (whole seconds, at most
        ``wait_time_s``), or ``empty_poll_wait_s`` when it must answer at once."""
        if wait_s > 0:
            return whole_seconds(wait_s, upper=self.options.wait_time_s)
        return self.options.empty_poll_wait_s

    def _patience(self, call: Call[Message], wait_s: float, own: bool) -> float | None:
        """A poll of the receive's own ends by itself; an adopted one that would outlive the
        receive's wait is waited for that long (then left parked for the next receive)."""
        if own:
            return None
        ends_at = call.started_at + self._poll_seconds(call.wait_s)
        return wait_s if ends_at > asyncio.get_running_loop().time() + wait_s else None

    def _count_adopted(self, queue: str) -> None:
        self.calls["adopted"] += 1

    def _run_poll(
        self, poll: _Poll, loop: asyncio.AbstractEventLoop, max_messages: int, wait_s: int
    ) -> None:
        """Worker thread: receive, then hand the answer to the loop (or release it)."""
        error: DriverError | None = None
        raw: list[MessageTypeDef] = []
        try:
            raw = self._api.receive(poll.url, max_messages, wait_s, poll.visibility_s)
        except DriverError as exc:
            error = exc
        try:
            loop.call_soon_threadsafe(self._poll_answered, poll, raw, error)
        except RuntimeError:  # the loop is closed: nobody can take these any more
            if raw:
                self._api.release(poll.url, [item["ReceiptHandle"] for item in raw])

    def _poll_answered(
        self, poll: _Poll, raw: list[MessageTypeDef], error: DriverError | None
    ) -> None:
        """Loop thread: note what the poll says about the queue, then answer its call (the
        parked receive gives the messages to a receive, or back)."""
        self._polls.discard(poll)
        poll.answered_ms = now_ms()
        self._note_quiet(poll, raw, error)
        if error is not None:
            poll.outcome.set_exception(error)
            return
        try:
            messages = [self._message(poll.queue, poll, item) for item in raw]
        except Exception as exc:  # never leave the call unanswered: its receive waits on
            self._release_later(poll.url, [h for item in raw if (h := item.get("ReceiptHandle"))])
            poll.outcome.set_exception(DriverError(f"ReceiveMessage: unreadable answer: {exc}"))
            return
        poll.outcome.set_result(messages)

    def _message(self, queue: str, poll: _Poll, item: MessageTypeDef) -> Message:
        system = item.get("Attributes", {})
        raw_attributes = dict(item.get("MessageAttributes", {}))
        attributes = {
            name: value["StringValue"]
            for name, value in raw_attributes.items()
            if "StringValue" in value and not value.get("DataType", "").startswith("Binary")
        }
        content_type = attributes.pop(CONTENT_TYPE_ATTRIBUTE, None)
        receipt = SqsReceipt(
            item["ReceiptHandle"], poll.url, _resendable(raw_attributes),
            system.get("MessageGroupId"),
        )
        return Message(
            id=item["MessageId"],
            queue=queue,
            priority=self.context.priority_of(queue),
            body=item.get("Body", "").encode("utf-8"),
            attributes=attributes,
            attempt=int(system.get("ApproximateReceiveCount", "1")),
            enqueued_ms=int(system.get("SentTimestamp", poll.answered_ms)),
            lease=Lease(
                receipt, poll.answered_ms + poll.visibility_s * 1000 - _CLOCK_MARGIN_MS
            ),
            content_type=content_type,
            received_ms=poll.answered_ms,
        )

    # -- settling --------------------------------------------------------------------------

    async def ack(self, message: Message) -> None:
        receipt = live_token(message, SqsReceipt, "ack")
        await self._deletes.submit(receipt.queue_url, receipt.handle)

    async def retry(self, message: Message, delay_s: float) -> None:
        receipt = live_token(message, SqsReceipt, "retry")
        seconds = whole_seconds(min(max(0.0, delay_s), self._visibility_left_s(message)))
        await self._visibility.submit(receipt.queue_url, (receipt.handle, seconds))

    async def release(self, message: Message, delay_s: float = 0.0) -> None:
        """As ``retry``: SQS cannot undo the receive count (``releases_count_as_attempts``)."""
        self.calls["released"] += 1
        await self.retry(message, delay_s)

    async def extend(self, message: Message, duration_s: float) -> None:
        receipt = live_token(message, SqsReceipt, "extend", grace_ms=_EXTEND_GRACE_MS)
        left_s = self._visibility_left_s(message)
        if left_s < 1:
            raise LeaseLost(
                f"message {message.id}: SQS caps visibility at 12 h from receive; it becomes "
                f"visible again at its deadline and will be redelivered"
            )
        seconds = whole_seconds(min(duration_s, left_s))
        if seconds < duration_s:
            log.warning("sqs.extend_clamped", message_id=message.id, seconds=seconds)
        started_ms = now_ms()
        await self._visibility.submit(receipt.queue_url, (receipt.handle, seconds))
        message.lease.deadline_ms = started_ms + seconds * 1000

    async def dead_letter(self, message: Message, reason: str) -> None:
        if self.context.dead_letter_queue is None:
            raise DriverError("dead_letter: no dead_letter.queue configured")
        receipt = live_token(message, SqsReceipt, "dead_letter")
        attributes = dict(receipt.raw_attributes)
        extra = {DEAD_LETTER_REASON: reason[:_REASON_CHARS], DEAD_LETTER_SOURCE: message.queue}
        for name, value in string_attributes(extra).items():
            if name in attributes or len(attributes) < MAX_ATTRIBUTES:
                attributes[name] = value
            else:
                log.warning("sqs.dead_letter_attribute_dropped", name=name, id=message.id)
        await self._call(
            "SendMessage", functools.partial(
                self._api.send, group_id=receipt.group_id, dedup_id=message.id
            ),
            self._url(self.context.dead_letter_queue), message.body.decode("utf-8"), attributes,
        )
        await self._deletes.submit(receipt.queue_url, receipt.handle)

    @staticmethod
    def _visibility_left_s(message: Message) -> float:
        held_s = (now_ms() - message.received_ms) / 1000
        return MAX_VISIBILITY_S - _VISIBILITY_MARGIN_S - held_s

    # -- optional abilities: depth, publish, ping --------------------------------------------

    def _note_quiet(
        self, poll: _Poll, raw: list[MessageTypeDef], error: DriverError | None
    ) -> None:
        """Remember a long poll's empty answer; any message or error forgets it."""
        if raw or error is not None:
            self._quiet_since.pop(poll.queue, None)
        elif poll.proves_empty:
            self._quiet_since[poll.queue] = asyncio.get_running_loop().time()

    def _known_empty(self, queue: str) -> bool:
        """The sidecar's own long polls already say the queue has no visible message: one
        has been waiting on it unanswered for a second or more (a long poll answers as soon
        as a message is visible), or the latest one came back empty and another is waiting
        now (or that answer is younger than one poll); only polls that ``proves_empty``
        count (never on a FIFO queue)."""
        now = asyncio.get_running_loop().time()
        waiting = [poll for poll in self._polls if poll.queue == queue and poll.proves_empty]
        if any(now - poll.started_at >= _UNANSWERED_POLL_S for poll in waiting):
            return True
        since = self._quiet_since.get(queue)
        if since is None:
            return False
        return bool(waiting) or now - since < self.options.wait_time_s

    async def depth(self, queue: str) -> QueueDepth:
        """Visible, in flight and delayed messages (GetQueueAttributes). While the sidecar's
        long polls find the queue empty, visible is 0 from them and no call is made, so an
        idle queue costs its long polls only (3 calls/min); in flight and delayed are then
        unknown."""
        if self._known_empty(queue):
            self.depths_from_polls += 1
            return QueueDepth(visible=0, in_flight=None, delayed=None)
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        found = await self._call(
            "GetQueueAttributes", self._api.attributes, await self._resolve(queue), names
        )

        def count(name: str) -> int | None:
            return int(found[name]) if name in found else None

        return QueueDepth(
            visible=count(names[0]), in_flight=count(names[1]), delayed=count(names[2])
        )

    async def publish(self, queue: str, body: bytes, attributes: Mapping[str, str] | None = None,
                      content_type: str | None = None) -> str:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise DriverError(
                "publish: SQS bodies are text; base64-encode binary data "
                "(and configure the base64 transform)"
            ) from None
        named = dict(attributes or {})
        if content_type:
            named[CONTENT_TYPE_ATTRIBUTE] = content_type
        if len(named) > MAX_ATTRIBUTES:
            raise DriverError(f"publish: SQS allows at most {MAX_ATTRIBUTES} message attributes")
        size = len(body) + sum(len(k.encode()) + len(v.encode()) + 6 for k, v in named.items())
        if size > self.options.max_message_bytes:
            raise MessageTooLarge(
                f"publish: {size} bytes exceeds driver.max_message_bytes "
                f"({self.options.max_message_bytes})"
            )
        url = await self._resolve(queue)
        return await self._call(
            "SendMessage", self._api.send, url, text, string_attributes(named)
        )

    async def publish_via_sns(
        self, topic_arn: str, body: bytes, attributes: Mapping[str, str] | None = None
    ) -> str:
        """``publish --via-sns TOPIC_ARN``: publish as Dapr's snssqs does (see ``sqs_sns``)."""
        send = functools.partial(
            publish_via_sns, region=self.options.region, endpoint_url=self.options.endpoint
        )
        return await self._call("SNS Publish", send, topic_arn, body, attributes)

    async def ping(self) -> None:
        known = [*self.context.queues, *self._urls]
        if not known:  # a publisher-only sidecar before any stream: nothing to reach yet
            return
        first = self._url(known[0])
        await self._call("GetQueueAttributes", self._api.attributes, first, ["QueueArn"])

    # -- plumbing --------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None or self._closed:
            raise DriverError("the SQS driver is not started (or already closed)")
        return self._executor

    def _url(self, queue: str) -> str:
        try:
            return self._urls[queue]
        except KeyError:
            raise DriverError(f"queue {queue!r} is not configured for this driver") from None

    async def _resolve(self, queue: str) -> str:
        if queue not in self._urls:
            url = self.options.queue_urls.get(queue)
            if url is None:
                url = await self._call("GetQueueUrl", self._api.queue_url, queue)
            self._urls[queue] = url
        return self._urls[queue]

    async def _call(self, action: str, fn: Callable[..., T], *args: object) -> T:
        self.calls[action] += 1
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), functools.partial(fn, *args))

    async def _send_deletes(self, url: str, handles: Sequence[str]) -> list[DriverError | None]:
        """One delete call for what ``_deletes`` grouped: DeleteMessage when alone."""
        if len(handles) == 1:
            await self._call("DeleteMessage", self._api.delete, url, handles[0])
            return [None]
        return await self._call("DeleteMessageBatch", self._api.delete_batch, url, handles)

    async def _send_visibility(
        self, url: str, changes: Sequence[tuple[str, int]]
    ) -> list[DriverError | None]:
        """One visibility call for what ``_visibility`` grouped (retries, releases, extends)."""
        if len(changes) == 1:
            handle, seconds = changes[0]
            await self._call("ChangeMessageVisibility", self._api.change_visibility, url,
                             handle, seconds)
            return [None]
        return await self._call(
            "ChangeMessageVisibilityBatch", self._api.change_visibility_batch, url, changes
        )

    def _release_unseen(self, queue: str, messages: list[Message]) -> None:
        """Return messages no receive took (the parked receive's ``release``)."""
        self._release_later(self._url(queue), [m.lease.token.handle for m in messages])

    def _release_later(self, url: str, handles: list[str]) -> None:
        """Make messages visible again at once, without making anyone wait."""
        if not handles:
            return
        self.calls["released"] += len(handles)
        self.calls["ChangeMessageVisibilityBatch"] += math.ceil(len(handles) / MAX_BATCH)
        task = asyncio.get_running_loop().create_task(self._release(url, handles))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self, url: str, handles: list[str]) -> None:
        loop = asyncio.get_running_loop()
        executor = self._executor
        if executor is None:
            return
        try:
            failed = await loop.run_in_executor(executor, self._api.release, url, handles)
        except (DriverError, RuntimeError) as exc:  # RuntimeError: executor shut down
            log.warning("sqs.release_failed", count=len(handles), error=str(exc))
            return
        if failed:
            log.warning("sqs.release_refused", count=len(failed))


def _resendable(
    raw: Mapping[str, MessageAttributeValueOutputTypeDef],
) -> dict[str, MessageAttributeValueTypeDef]:
    """Received attributes in the shape SendMessage takes (for dead-lettering them)."""
    kept: dict[str, MessageAttributeValueTypeDef] = {}
    for name, value in raw.items():
        attribute: MessageAttributeValueTypeDef = {"DataType": value["DataType"]}
        if "StringValue" in value:
            attribute["StringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            attribute["BinaryValue"] = value["BinaryValue"]
        kept[name] = attribute
    return kept
