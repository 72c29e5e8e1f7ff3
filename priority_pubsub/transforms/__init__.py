"""Body transforms (``base`` is the contract and the chain); third parties add their own
through the ``priority_pubsub.transforms`` entry-point group.

May import ``telemetry``, ``settings`` and ``core``; never ``drivers`` or anything above.
"""
