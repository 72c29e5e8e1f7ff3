"""Reaching the app: the request a delivery sends (``request``), the CloudEvent it carries
(``cloudevent``, ``cloudevent_check``), the channels that send it (``channel``: HTTP and
gRPC), and what guards the app (``gate``, ``health``, ``circuit``, ``backpressure``).

May import ``drivers``/``transforms``, ``telemetry``, ``settings`` and ``core``; never the
delivery path above it.
"""
