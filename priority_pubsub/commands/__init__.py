"""What the CLI runs besides the sidecar itself: the operator commands (``ops``: check,
publish, stats, requeue), the delivery ``report`` (its checks before Spark starts, the
run, what it prints), the local ``demo`` and the ``sample_app`` it delivers to
(``python -m priority_pubsub.commands.sample_app``).

May import ``sidecar`` and everything below it (``dapr``, ``publish_api``, ``provision``,
``analytics``, ``delivery``, ``app``, ``drivers``, ``telemetry``, ``settings``, ``core``);
only ``cli`` imports it.
"""
