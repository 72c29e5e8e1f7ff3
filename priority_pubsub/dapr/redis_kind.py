"""``pubsub.redis``: Dapr's Redis Streams component mapped onto the ``redis`` driver.

components-contrib ``pubsub/redis/redis.go`` and ``common/component/redis/settings.go``: the
stream is the topic itself, the group is ``consumerID`` (default: the app id), created from
``0``; the entry's ``data`` is the message and ``metadata`` (JSON) its metadata. daprd does
not back off: a failed entry stays pending and is reclaimed once idle for
``processingTimeout`` (default 60 s) — so the lease and the retry delay both map to it, and
``redeliverInterval`` (how often daprd looks) to ``reclaim_interval_s``. daprd retries
without end; ``retry.max_attempts`` (default 10) ends that here with a dead letter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from priority_pubsub.core.errors import ConfigError
from priority_pubsub.dapr.components import ComponentContext, ComponentKind, Mapped, Unwrapped
from priority_pubsub.transforms.base import Payload

if TYPE_CHECKING:
    import redis

DEFAULT_PROCESSING_TIMEOUT_S = 60.0
_HONOURED = frozenset({
    "redisHost", "redisPassword", "redisUsername", "redisDB", "enableTLS", "consumerID",
    "processingTimeout", "redeliverInterval", "maxLenApprox",
})
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_s(key: str, text: str) -> float:
    """Dapr's duration metadata: a number of milliseconds or a Go duration (``1m30s``)."""
    text = text.strip()
    if text.isdigit():
        return int(text) / 1000
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"component metadata {key}: not a duration: {text!r}")
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


class RedisStreams(ComponentKind):
    type = "pubsub.redis"
    driver = "redis"

    def map(self, component: ComponentContext) -> Mapped:
        md = component.metadata
        scheme = "rediss" if component.flag("enableTLS") else "redis"
        host = md.get("redisHost") or "localhost:6379"
        driver: dict[str, Any] = {
            "type": self.driver, "url": f"{scheme}://{host}/{md.get('redisDB') or 0}",
            "group": component.consumer_id,
        }
        if md.get("redisPassword"):
            driver["password"] = md["redisPassword"]
        if md.get("redisUsername"):
            driver["username"] = md["redisUsername"]
        if md.get("maxLenApprox"):
            driver["max_len_approx"] = int(md["maxLenApprox"])
        if md.get("redeliverInterval"):
            driver["reclaim_interval_s"] = max(
                0.1, go_duration_s("redeliverInterval", md["redeliverInterval"]))
        timeout_s = DEFAULT_PROCESSING_TIMEOUT_S
        if md.get("processingTimeout"):
            timeout_s = max(1.0, go_duration_s("processingTimeout", md["processingTimeout"]))
        settings = {
            "lease": {"duration_s": timeout_s},
            "retry": {"initial_delay_s": timeout_s, "max_delay_s": timeout_s},
        }
        return Mapped(driver, settings, _HONOURED)

    def queue_for(self, component: ComponentContext, topic: str) -> str:
        return topic  # the stream is the topic; the group tells apps apart

    def unwrap(self, component: ComponentContext, payload: Payload) -> Unwrapped:
        metadata = {f"metadata.{name}": value for name, value in payload.attributes.items()}
        return Unwrapped(payload.body, None, metadata, payload.content_type)

    def entities(self, component: ComponentContext, driver: Mapping[str, Any]
                 ) -> RedisTopics:
        return RedisTopics(driver)


class RedisTopics:
    """Publishing as daprd's ``pubsub.redis`` Publish does (``XADD <topic> * data <event>``,
    ``MAXLEN ~ maxLenApprox``): for the publish API and Dapr dead-letter topics. Nothing to
    create: the driver declares its streams and group at start."""

    def __init__(self, driver: Mapping[str, Any]) -> None:
        from priority_pubsub.drivers.redis.options import RedisOptions

        self._options = RedisOptions.model_validate(dict(driver))
        self._client: redis.Redis | None = None

    def ensure(self, queues: list[tuple[str, tuple[str, ...]]],
               dead_letter_queue: str | None) -> None:
        return None

    def publish(self, topic: str, data: bytes) -> None:
        import redis

        from priority_pubsub.drivers.redis.driver import connection_options
        from priority_pubsub.drivers.redis.entries import map_error

        options = self._options
        try:
            if self._client is None:
                self._client = redis.Redis.from_url(
                    options.url.get_secret_value(), socket_timeout=options.call_timeout_s,
                    **connection_options(options))
            self._client.xadd(topic, {"data": data}, maxlen=options.max_len_approx,
                              approximate=True)
        except (redis.RedisError, OSError) as exc:
            raise map_error(exc, f"publish to {topic!r}") from exc
