"""The Azure Service Bus driver: consume and settle (``driver``), its ``driver:`` keys
(``options``), what only the monitor asks of it (``monitoring``), and what a message carries
(``wire``: properties, lock token, errors).

The package re-exports the driver class, so
``priority_pubsub.drivers.azure_servicebus:ServiceBusDriver`` (the entry point) names it. May
import ``drivers.base``/``parking``, ``settings``, ``telemetry``, ``core``.
"""

from priority_pubsub.drivers.azure_servicebus.driver import ServiceBusDriver

__all__ = ["ServiceBusDriver"]
