"""The Redis Streams driver: consume and settle (``driver``), its ``driver:`` keys
(``options``), what only the monitor asks of it (``monitoring``), what a stream entry carries
(``entries``) and its Lua scripts (``scripts``).

The package re-exports the driver class, so ``priority_pubsub.drivers.redis:RedisDriver`` (the
``redis`` entry point) names it. Inside, ``import redis`` is still the redis-py SDK (absolute
imports). May import ``drivers.base``, ``settings``, ``telemetry``, ``core``.
"""

from priority_pubsub.drivers.redis.driver import RedisDriver

__all__ = ["RedisDriver"]
