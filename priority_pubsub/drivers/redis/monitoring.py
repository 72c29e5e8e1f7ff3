"""What only the monitor asks of Redis: list the entries the group has not taken yet
(``browse``), read chosen ones by id (``receive_ids``) and promote one to another stream
(``move_waiting``).

A mixin of ``RedisDriver`` (the monitor finds these abilities on the driver through the
``DeadLetterBrowser``, ``IdReceiver`` and ``WaitingMover`` protocols); consume and settle
never use it. It uses the driver's client and scripts, and builds messages as ``receive``
does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from priority_pubsub.core.message import Message, now_ms
from priority_pubsub.drivers.base import (
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DeadLetter,
    NotAddressable,
)
from priority_pubsub.drivers.redis.entries import (
    ENTRY_ID,
    METADATA_FIELD,
    attributes_of,
    entry_order,
    fields_with,
    sdk_errors,
    text,
)
from priority_pubsub.drivers.redis.options import RedisOptions

__all__ = ["RedisMonitoring"]


class RedisMonitoring:
    """The monitor's abilities, on the driver's client and scripts."""

    if TYPE_CHECKING:  # the driver's parts these methods use
        import redis.asyncio as aioredis

        options: RedisOptions
        _client: aioredis.Redis

        async def _group_info(self, queue: str) -> dict[str, Any]: ...
        def _message(self, queue: str, entry: list[Any], received_ms: int,
                     waiting: bool = False) -> Message: ...
        async def _script(self, name: str, stream: str, keys: list[str],
                          args: list[Any]) -> Any: ...

    async def browse(self, queue: str, limit: int) -> list[DeadLetter]:
        """The entries the group has not taken yet (``XRANGE`` after its last-delivered id):
        what waits, read without ``XREADGROUP``, so nothing is leased or counted."""
        group = await self._group_info(queue)
        with sdk_errors(f"browse {queue!r}"):
            # redis-py types replies loosely; without decode_responses they are bytes
            entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await self._client.xrange(
                queue, min=f"({group['last-delivered-id']}", count=limit))
        letters = []
        for raw_id, values in entries:
            entry_id = text(raw_id)
            attributes, _ = attributes_of(values.get(METADATA_FIELD))
            letters.append(DeadLetter(
                id=entry_id, source=attributes.get(DEAD_LETTER_SOURCE),
                reason=attributes.get(DEAD_LETTER_REASON), attempts=None,
                first_seen_ms=None, last_seen_ms=int(entry_id.split("-", 1)[0])))
        return letters

    async def receive_ids(self, queue: str, ids: Sequence[str]) -> list[Message]:
        """The chosen entries among those ``browse`` lists (after the group's last-delivered
        id), read with ``XRANGE`` and taken by nobody: the group's pending list is not
        touched, since ``XREADGROUP`` could only take the oldest. ``ack`` then deletes the
        entry (``XDEL``, if the group has still not taken it), ``release`` leaves it. The CLI's
        ``requeue`` (publish, then ack) works on them unchanged: a requeue cut short between
        its two steps leaves the message in both streams, never in neither."""
        group = await self._group_info(queue)
        last = entry_order(group["last-delivered-id"])
        wanted = [i for i in dict.fromkeys(ids) if ENTRY_ID.match(i) and entry_order(i) > last]
        if not wanted:
            return []
        with sdk_errors(f"read chosen entries of {queue!r}"):
            async with self._client.pipeline(transaction=False) as pipe:
                for entry_id in wanted:
                    pipe.xrange(queue, min=entry_id, max=entry_id, count=1)
                found = await pipe.execute()
        received = now_ms()
        messages = []
        for entries in found:
            for raw_id, values in entries:  # values: a dict of bytes (no decode_responses)
                flat = [item for pair in values.items() for item in pair]
                messages.append(self._message(queue, [raw_id, flat, 1], received,
                                              waiting=True))
        return messages

    async def move_waiting(self, queue: str, message_id: str, to_queue: str,
                           attributes: Mapping[str, str]) -> str | None:
        """``WaitingMover`` (the monitor's promote): the entry read by id, then one script
        (``MOVE_WAITING``) adds its copy to ``to_queue`` with ``attributes`` added and deletes
        it, if the group has still not taken it. Only where this group is the stream's only
        one: an entry deleted is gone for every group (``NotAddressable`` otherwise)."""
        if not ENTRY_ID.match(message_id):
            return None
        with sdk_errors(f"read entry {message_id} of {queue!r}"):
            entries = cast(list[tuple[bytes, dict[bytes, bytes]]], await self._client.xrange(
                queue, min=message_id, max=message_id, count=1))
        if not entries:
            return None
        values = entries[0][1]
        kept, _ = attributes_of(values.get(METADATA_FIELD))
        fields = fields_with(values.items(), kept | dict(attributes))
        moved = await self._script("MOVE_WAITING", queue, [queue, to_queue], [
            self.options.group, message_id, self.options.max_len_approx or "", *fields])
        if moved == -1:
            raise NotAddressable(
                f"redis: stream {queue!r} is read by another consumer group too: a waiting "
                "entry taken out of it would be gone for that group as well")
        return None if moved == 0 else text(moved)
