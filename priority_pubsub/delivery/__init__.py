"""A message's path from take to settle: the receiver takes messages when workers are free,
the dispatcher and scheduler choose which priority goes next, workers run the transforms and
send to the app, the settler turns each outcome into the broker's ack, retry or dead letter
(``settlement`` is that decision, pure), and ``leases`` keeps leases extended meanwhile;
``cancel`` is the one way a running delivery is cut short (its timeout, or any other cancel).
``control`` holds the operator's pauses and drain the dispatcher obeys; ``requeue`` moves one
dead letter back (the CLI's ``requeue`` and the monitor's).

May import ``app``, ``drivers``/``transforms``, ``telemetry``, ``settings`` and ``core``;
never ``sidecar``, ``commands``, ``dapr``, ``publish_api`` or the CLI above it.
"""
