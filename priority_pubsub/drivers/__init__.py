"""Queue drivers, installed as ``priority_pubsub.drivers``; third parties add their own through
the ``priority_pubsub.drivers`` entry-point group."""
