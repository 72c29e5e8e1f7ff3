"""The Redis Streams topology: streams with unique names on one Redis, written as daprd's
``pubsub.redis`` writes them (``XADD <topic> * data <body> [metadata <json>]``).

Streams and the consumer group need no set-up: the driver declares them at start. ``close``
deletes every key this topology named (streams and the driver's parked-retry sets).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import redis

from priority_pubsub.drivers.base import DEAD_LETTER_ATTRIBUTES, DEAD_LETTER_REASON
from tests.support.redis_server import unique
from tests.support.topologies.base import DeadLetter

GROUP = "priority-pubsub"


def group_lag(raw: redis.Redis, stream: str, group: Mapping[Any, Any]) -> int:
    """Entries of ``stream`` after the group's last-delivered id (``group``: its row of
    XINFO GROUPS). Redis reports ``lag`` as null when it cannot tell (after an AOF reload, or
    entries deleted mid-stream): then they are counted, all of them (test streams are short)."""
    if group["lag"] is not None:
        return int(group["lag"])
    last = group["last-delivered-id"]
    after = f"({last.decode() if isinstance(last, bytes) else last}"
    return len(raw.xrange(stream, min=after))
"""The driver's default consumer group."""


class RedisTopology:
    """Fresh stream names on the Redis at ``url``; dead letters go to the stream ``<p>-dead``."""

    driver_type: ClassVar[str] = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = unique("e2e")
        self.dead = self.queue("dead")
        self.raw = redis.Redis.from_url(url)

    def queue(self, suffix: str, lease_s: float = 2.0) -> str:
        return f"{self.prefix}-{suffix}"

    def publish(self, queue: str, body: bytes,
                attributes: Mapping[str, str] | None = None) -> None:
        self.publish_many(queue, [body], attributes)

    def publish_many(self, queue: str, bodies: list[bytes],
                     attributes: Mapping[str, str] | None = None) -> None:
        with self.raw.pipeline(transaction=False) as pipe:
            for body in bodies:
                fields: dict[str, Any] = {"data": body}
                if attributes:
                    fields["metadata"] = json.dumps(dict(attributes))
                pipe.xadd(queue, fields)
            pipe.execute()

    def entries(self, stream: str) -> list[dict[bytes, bytes]]:
        """Every entry of ``stream``, oldest first, left in place."""
        return [fields for _, fields in self.raw.xrange(stream)]

    def dead_letters(self) -> list[DeadLetter]:
        letters = []
        for entry_id, fields in self.raw.xrange(self.dead):
            metadata = json.loads(fields.get(b"metadata", b"{}"))
            attributes = {k: v for k, v in metadata.items() if k not in DEAD_LETTER_ATTRIBUTES}
            letters.append(DeadLetter(fields.get(b"data", b""), attributes,
                                      metadata.get(DEAD_LETTER_REASON)))
            self.raw.xdel(self.dead, entry_id)
        return letters

    def pending(self, stream: str) -> int:
        """Entries of ``stream`` delivered to the group and not settled yet."""
        return int(self.raw.xpending(stream, GROUP)["pending"])

    def unread(self, stream: str) -> int:
        """Entries of ``stream`` the group has not finished with (lag + pending); -1 before
        the group exists."""
        for group in self.raw.xinfo_groups(stream):
            if group["name"] == GROUP.encode():
                return group_lag(self.raw, stream, group) + int(group["pending"])
        return -1

    def driver_options(self) -> dict[str, Any]:
        # idle replicas look for lapsed leases twice a second: the lease scenarios use 1 s
        return {"type": self.driver_type, "url": self.url, "reclaim_interval_s": 0.5}

    def dead_letter_config(self) -> dict[str, Any] | None:
        return {"queue": self.dead}

    def reconnect(self, url: str) -> None:
        """Point the admin client at ``url`` again (a Redis the test restarted)."""
        self.raw.close()
        self.url = url
        self.raw = redis.Redis.from_url(url)

    def close(self) -> None:
        keys = list(self.raw.scan_iter(match=f"*{self.prefix}*"))
        if keys:
            self.raw.delete(*keys)
        self.raw.close()
