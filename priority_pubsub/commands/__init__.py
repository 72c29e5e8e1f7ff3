"""What the CLI runs: the sidecar (``run``: read from a plain command line before the CLI's
parser is imported), the operator commands (``ops``: check, publish, stats, requeue), the
delivery ``report`` (its checks before Spark starts, the run, what it prints), the local
``demo`` and the ``sample_app`` it delivers to (``python -m priority_pubsub.commands.sample_app``).

May import ``sidecar`` and everything below it (``dapr``, ``publish_api``, ``provision``,
``analytics``, ``delivery``, ``app``, ``drivers``, ``telemetry``, ``settings``, ``core``);
only ``cli`` and ``__main__`` import it.
"""
