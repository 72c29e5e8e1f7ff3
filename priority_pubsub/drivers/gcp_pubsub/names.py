"""Pub/Sub resource names and SDK-error mapping (``map_error``) for the ``gcp_pubsub`` driver.

Kept apart from the driver so both are short, and so the name rules are testable without a
broker. Users may write a bare id (``tasks-high``) or a full path
(``projects/p/subscriptions/tasks-high``); the driver always talks in full paths.
"""

from __future__ import annotations

import os
import re

from google.api_core import exceptions as gexc

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost

_PATH = re.compile(r"^projects/(?P<project>[^/]+)/(?P<kind>topics|subscriptions)/(?P<id>[^/]+)$")

# Failures that may pass if the same call is made again later: the broker is restarting,
# overloaded, slow, or the network dropped. Everything else is the caller's or the
# deployment's fault (missing subscription, no permission, bad request) and will not heal.
_TRANSIENT: tuple[type[Exception], ...] = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.TooManyRequests,
    gexc.InternalServerError,
    gexc.Aborted,
    gexc.Unknown,
    gexc.RetryError,
)


EMULATOR_RETRY_POLICY_BUG = (
    "the Pub/Sub emulator's retry policy can stop a subscription redelivering for good: once "
    "two delayed messages share a backoff slot it schedules one twice, the second nack fails "
    "and no nacked or expired message of that subscription ever comes back"
)
"""Why the emulator gets no retry policy (seen in cloud-pubsub-emulator 0.8.20: a
NullPointerException in ``MessageBacklog.nackMessage`` ends the subscription's redelivery
task; Google's service is not affected)."""


def on_emulator() -> bool:
    """Whether the SDK talks to the emulator (``PUBSUB_EMULATOR_HOST``), not to Google."""
    return bool(os.environ.get("PUBSUB_EMULATOR_HOST"))


def resource_path(name: str, kind: str, project: str | None) -> str:
    """``projects/{project}/{kind}/{name}``, or ``name`` itself when it already is a path.

    ``kind`` is ``topics`` or ``subscriptions``. A bare id needs ``project``.
    """
    match = _PATH.match(name)
    if match:
        if match["kind"] != kind:
            raise DriverError(f"{name!r} names {match['kind']}, expected {kind}")
        return name
    if "/" in name:
        raise DriverError(f"{name!r} is neither an id nor projects/<p>/{kind}/<id>")
    if not project:
        raise DriverError(
            f"{name!r} is a bare id: set driver.project (or GOOGLE_CLOUD_PROJECT) or give "
            f"the full path projects/<p>/{kind}/{name}"
        )
    return f"projects/{project}/{kind}/{name}"


def is_path(name: str, kind: str) -> bool:
    match = _PATH.match(name)
    return bool(match and match["kind"] == kind)


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """Wrap an SDK exception: transient ones become ``DriverUnavailable``.

    When ``settling``, an ack id the broker refuses means the lease is gone: Pub/Sub answers
    INVALID_ARGUMENT ("Invalid ack id") or, on exactly-once subscriptions,
    FAILED_PRECONDITION for an ack id it no longer honours. Our ack ids come straight from a
    pull, so they are never malformed: a refusal means another delivery superseded ours.
    """
    if settling and isinstance(exc, gexc.InvalidArgument | gexc.FailedPrecondition):
        return LeaseLost(f"pub/sub {action}: the broker refused the ack id: {exc}")
    detail = f"pub/sub {action}: {type(exc).__name__}: {exc}"
    if isinstance(exc, _TRANSIENT):
        return DriverUnavailable(detail)
    return DriverError(detail, retriable=False)
