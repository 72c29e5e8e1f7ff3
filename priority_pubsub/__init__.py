"""priority-pubsub: a priority subscriber sidecar that delivers queue messages as CloudEvents."""

__version__ = "0.1.0"
