"""The local SQLite driver: consume and settle (``driver``), its ``driver:`` keys
(``options``), what only the monitor asks of it (``monitoring``), the queue file's layout
(``schema``) and the thread that owns its connection (``sqlite_worker``).

The package re-exports the driver class, so ``priority_pubsub.drivers.local:LocalDriver`` (the
entry point) names it. May import ``drivers.base``, ``settings``, ``telemetry``, ``core``.
"""

from priority_pubsub.drivers.local.driver import LocalDriver

__all__ = ["LocalDriver"]
