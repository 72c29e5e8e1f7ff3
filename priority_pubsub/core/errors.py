"""One error hierarchy for the whole sidecar.

Every error says, where it is raised, whether trying again can help (``retriable``), so callers
decide by type and flag, never by parsing messages. Drivers wrap SDK exceptions at their
boundary into ``DriverError`` subclasses (``raise DriverUnavailable(...) from exc``).
"""

from __future__ import annotations


class PriorityPubsubError(Exception):
    """Root of every error this project raises on purpose."""

    retriable: bool = False


class ConfigError(PriorityPubsubError):
    """The configuration is invalid; ``str(err)`` is one line naming the key path.

    A value echoed into the message may be huge (a 10 kB string where a name belongs): the
    line is cut at ``MAX_CHARS`` so it stays readable, its head naming file and field."""

    MAX_CHARS = 500

    def __init__(self, message: str) -> None:
        if len(message) > self.MAX_CHARS:
            message = (f"{message[:self.MAX_CHARS]}... "
                       f"({len(message) - self.MAX_CHARS} more characters)")
        super().__init__(message)


class DriverError(PriorityPubsubError):
    """A broker call failed. ``retriable`` tells whether the same call may succeed later."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


class DriverUnavailable(DriverError):
    """The broker cannot be reached right now (network, throttling, restart): try again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=True)


class LeaseLost(DriverError):
    """The message's lease lapsed and someone else may own it: settling it now is refused.

    Raised instead of silently acking a message another replica may already be processing.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class MessageTooLarge(DriverError):
    """A published body exceeds what the broker (or the local driver's limit) accepts."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


class TransformError(PriorityPubsubError):
    """A transform cannot make sense of a body; the message is dead-lettered, never retried."""


class TransformUnavailable(TransformError):
    """A transform needs a service that failed for now (e.g. S3 throttling or a network
    error fetching a claim-checked body): the message is retried, not dead-lettered."""

    retriable = True
