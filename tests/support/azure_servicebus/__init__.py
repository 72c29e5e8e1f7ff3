"""A minimal, in-memory Azure Service Bus-compatible AMQP 1.0 broker for tests.

No Service Bus emulator can be installed on the test machines (the official one is a
container), so the driver is exercised through the real ``azure-servicebus`` SDK against this
broker, built on python-qpid-proton, listening on 127.0.0.1 without TLS. Point the SDK at it
with ``ServiceBusBroker.connection_string`` (``...;UseDevelopmentEmulator=true``: the SDK then
keeps the port from ``Endpoint=sb://127.0.0.1:PORT`` and connects in plain AMQP).

What the SDK really sends (read from its ``_pyamqp`` source and checked with frame traces):

- SASL ``ANONYMOUS`` (the SDK never uses PLAIN or MSSBCBS over this path), then a
  ``$cbs`` request/response link pair carrying ``put-token`` requests: a SAS token
  ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` for audience ``sb://host/entity``.
  The broker checks the HMAC-SHA256 signature against its key, the expiry, and that the
  audience covers the entity; every entity link needs such a token first, as on Service Bus
  (``amqp:unauthorized-access`` otherwise; ``401`` on a bad token).
- Senders attach to ``amqps://host/<queue or topic>`` and transfer single messages
  (``x-opt-scheduled-enqueue-time`` is honoured). Sending to a topic copies the message into
  every subscription.
- Receivers attach to ``amqps://host/<queue>``, ``<topic>/Subscriptions/<name>`` or either with
  ``/$DeadLetterQueue``, in rcv-settle-mode *second*, and issue credit per receive call
  (drain on close). Each delivery's tag is the lock token (a UUID in ``bytes_le`` order); the
  message carries ``x-opt-enqueued-time``, ``x-opt-sequence-number``, ``x-opt-locked-until``
  and ``x-opt-lock-token`` annotations and ``header.delivery-count`` = earlier failed
  deliveries (0 on the first one; Service Bus puts count-1 on the wire).
- Dispositions are answered settled with the applied outcome, as Service Bus does for
  rcv-settle-mode second: ``accepted`` = complete, ``modified`` (delivery-failed) = abandon
  (delivery count +1), ``modified`` + undeliverable-here = defer (refused, see below),
  ``rejected`` = dead-letter into ``<entity>/$DeadLetterQueue`` with the ``DeadLetterReason``
  and ``DeadLetterErrorDescription`` application properties, ``released`` = returned without
  counting a delivery. Settling a lock that expired or was already settled is answered
  ``rejected`` with ``com.microsoft:message-lock-lost`` (the SDK raises
  ``MessageLockLostError``).
- Lock expiry returns the message with delivery count +1; reaching the entity's
  ``max_delivery_count`` dead-letters it with reason ``MaxDeliveryCountExceeded``.
- ``<entity>/$management`` request/response operations: ``com.microsoft:renew-lock``,
  ``com.microsoft:update-disposition`` (settle by lock token: completed / abandoned /
  suspended), ``com.microsoft:peek-message``, ``com.microsoft:schedule-message`` and
  ``com.microsoft:cancel-scheduled-message``. Anything else answers ``501``.

Not implemented (each is refused loudly rather than faked): sessions, deferral
(``receive-by-sequence-number``), transactions, batched sends (message format
``0x80013700``, refused with ``amqp:not-implemented``), message TTL/expiry, duplicate
detection, auto-forwarding, subscription rules/filters (every subscription gets every
message), AAD/JWT tokens (only SAS tokens are accepted), the HTTP management (ATOM) API
and therefore runtime counts through the SDK's administration client, TLS, websockets,
multiple data sections in one body, and ``properties-to-modify`` on abandon. Deviation on
purpose: lock durations below Service Bus's 5 s minimum are allowed, so tests run fast.

Layout: ``entities.py`` (what is stored), ``sas.py`` (tokens), ``amqp.py`` (the proton
handler), ``broker.py`` (the facade tests use), ``fixtures.py`` (the session fixture),
``test_broker.py`` (the broker's own tests, through the real SDK), ``__main__.py`` (the
broker as a program) and ``process.py`` (it in a child process a test can kill with SIGKILL
and start again on its port, as the chaos suite's restart test does).
"""

from tests.support.azure_servicebus.broker import ServiceBusBroker, running_broker
from tests.support.azure_servicebus.entities import EntityCounts
from tests.support.azure_servicebus.sas import make_sas_token

__all__ = ["EntityCounts", "ServiceBusBroker", "make_sas_token", "running_broker"]
