"""Queue drivers, one module or package per broker (``sqs/``, ``gcp_pubsub/``, ``rabbitmq/``,
``redis/``, ``local/``, ``azure_servicebus``); ``base`` is the kit they share, ``batching``
their settle batcher and ``parking`` their parked receive (a broker call that outlives a
cancelled receive), ``registry`` builds the configured one. Third parties add their own
through the ``priority_pubsub.drivers`` entry-point group.

May import ``telemetry``, ``settings`` and ``core``; never ``transforms`` or anything above.
"""
