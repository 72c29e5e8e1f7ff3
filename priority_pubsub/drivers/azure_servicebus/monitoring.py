"""What only the monitor asks of Service Bus: list a dead-letter queue without locking
anything (``browse``) and take chosen messages out of it (``receive_ids``).

A mixin of ``ServiceBusDriver`` (the monitor finds these abilities on the driver through the
``DeadLetterBrowser`` and ``IdReceiver`` protocols); consume and settle never use it. It shares
the driver's client and its handler locks, so it says below which of the driver's parts it
relies on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from priority_pubsub.core.message import Message
from priority_pubsub.drivers.azure_servicebus.wire import (
    DLQ_SUFFIX,
    ENQUEUED_PROPERTY,
    Scan,
    application_properties,
    ms,
    new_receiver,
    sdk_errors,
)
from priority_pubsub.drivers.base import DeadLetter
from priority_pubsub.telemetry.logs import get_logger

__all__ = ["CHOOSE_SCAN_LIMIT", "CHOOSE_WAIT_S", "PEEK_CHUNK", "ServiceBusMonitoring"]

PEEK_CHUNK = 100
"""Messages asked of one peek or receive (Service Bus may answer fewer; ``browse`` and
``receive_ids`` ask again)."""
CHOOSE_SCAN_LIMIT = 1000
"""How many messages ``receive_ids`` receives at most while looking for the chosen ones."""
CHOOSE_WAIT_S = 1.0
"""How long one of ``receive_ids``'s receives waits for more (an empty answer ends it)."""

log = get_logger(__name__)


class ServiceBusMonitoring:
    """The monitor's abilities, on the driver's client and handlers."""

    if TYPE_CHECKING:  # the driver's parts these methods use
        _client: Any
        _gates: dict[Any, asyncio.Lock]
        _scans: set[Scan]

        def _receiver(self, queue: str) -> Any: ...
        def _gate(self, handler: Any) -> asyncio.Lock: ...
        async def _call(self, handler: Any, method: str, *args: Any, **kwargs: Any) -> Any: ...
        def _convert(self, queue: str, sdk_message: Any, scan: Scan | None = None) -> Message: ...

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        """``peek_messages`` from the queue's first sequence number on: nothing is locked and
        no delivery is counted. Each call starts again from the front (the SDK would go on
        from where the receiver's last peek stopped)."""
        receiver = self._receiver(queue)
        async with self._gate(receiver):
            with sdk_errors(f"browse {queue}"):
                await asyncio.wait_for(receiver.__aenter__(), 30)
        source = queue[: -len(DLQ_SUFFIX)] if queue.lower().endswith(DLQ_SUFFIX) else None
        letters: list[DeadLetter] = []
        next_sequence = 1
        while len(letters) < limit:
            with sdk_errors(f"browse {queue}"):
                peeked = await self._call(receiver, "peek_messages",
                                          max_message_count=min(PEEK_CHUNK, limit - len(letters)),
                                          sequence_number=next_sequence)
            if not peeked:
                break
            for sdk_message in peeked:
                enqueued = application_properties(sdk_message).get(ENQUEUED_PROPERTY)
                letters.append(DeadLetter(
                    id=str(sdk_message.message_id or sdk_message.sequence_number),
                    source=source, reason=sdk_message.dead_letter_reason, attempts=None,
                    first_seen_ms=int(enqueued) if enqueued else ms(
                        sdk_message.enqueued_time_utc),
                    last_seen_ms=None))
            next_sequence = max(m.sequence_number for m in peeked) + 1
        return letters[:limit]

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        """The chosen messages, locked as ``receive`` locks them, on a receiver of their own:
        it receives (peek-lock) from the front until every id is found (at most
        ``CHOOSE_SCAN_LIMIT``) and is closed once the chosen ones are settled, which hands
        the others back uncounted (closing at once when none was chosen). Service Bus's own
        way, receive by sequence number, needs each message deferred first: not used."""
        wanted = set(ids)
        if not wanted:
            return []
        receiver = new_receiver(self._client, queue)
        scan = Scan(receiver)
        self._scans.add(scan)
        chosen: list[Any] = []
        scanned = 0
        try:
            with sdk_errors(f"receive chosen from {queue}"):
                await asyncio.wait_for(receiver.__aenter__(), 30)
                while wanted and scanned < CHOOSE_SCAN_LIMIT:
                    batch = await self._call(
                        receiver, "receive_messages", max_wait_time=CHOOSE_WAIT_S,
                        max_message_count=min(PEEK_CHUNK, CHOOSE_SCAN_LIMIT - scanned))
                    if not batch:
                        break
                    scanned += len(batch)
                    for sdk_message in batch:
                        message_id = str(sdk_message.message_id or sdk_message.sequence_number)
                        if message_id in wanted:
                            wanted.discard(message_id)
                            chosen.append(sdk_message)
        except BaseException:
            await self._close_scan(scan)
            raise
        if not chosen:
            await self._close_scan(scan)
            return []
        scan.open = len(chosen)
        return [self._convert(queue, sdk_message, scan) for sdk_message in chosen]

    async def _close_scan(self, scan: Scan) -> None:
        self._scans.discard(scan)
        self._gates.pop(scan.receiver, None)
        try:
            await scan.receiver.close()
        except Exception as exc:  # the broker takes the locks back when they lapse
            log.warning("servicebus closing a receive_ids receiver failed", error=str(exc))
