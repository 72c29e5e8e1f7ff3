"""Body transforms, installed as ``priority_pubsub.transforms``; third parties add their own
through the ``priority_pubsub.transforms`` entry-point group."""
