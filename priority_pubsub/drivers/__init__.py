"""Queue drivers, one module or package per broker (``sqs/``, ``gcp_pubsub/``, ``rabbitmq/``,
``redis/``, ``local/``, ``azure_servicebus``); ``base`` is the kit they share and ``batching``
their settle batcher, ``registry`` builds the configured one. Third parties add their own
through the ``priority_pubsub.drivers`` entry-point group.

May import ``telemetry``, ``settings`` and ``core``; never ``transforms`` or anything above.
"""
