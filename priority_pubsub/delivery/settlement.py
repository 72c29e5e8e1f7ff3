"""What to do with a message: pure decisions, this project's second ``plan()``.

``admit`` decides before delivery, ``plan_settlement`` after: from the outcome, the broker's
attempt number, the retry policy and whether the attempt was cut short by shutdown, to the
one driver call that settles the message (``Settlement``). No I/O, no clock: tests replay
every case; the worker and the dispatcher (surplus releases) both settle through it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.settings.config import RetryConfig


class Verb(enum.StrEnum):
    """The driver call that settles a message (``Driver`` method names)."""

    ACK = "ack"
    RETRY = "retry"
    RELEASE = "release"
    DEAD_LETTER = "dead_letter"
    DROP = "drop"
    """Only for drivers that settle a drop their own way (``delivery.DropHandler``)."""


LAST_ATTEMPT_KEPT = "its last attempt: released, not dead-lettered for the stop"
"""What a stop-cut retry's reason adds at the limit (``plan_settlement``)."""


@dataclass(frozen=True, slots=True)
class Settlement:
    """One settle: the driver ``verb`` (with ``delay_s``) and what the journal will say."""

    kind: Kind
    verb: Verb
    delay_s: float = 0.0
    reason: str | None = None
    http_status: int | None = None


def admit(attempt: int, policy: RetryConfig, *, releases_counted: bool) -> Outcome | None:
    """A dead letter before delivery when the broker's count is past the limit, else None.

    Only where the count is exact: where a release counts as an attempt (SQS, Pub/Sub,
    Service Bus: ``releases_count_as_attempts``) a message only ever handed back unseen
    would otherwise die without the app seeing it. There it is delivered once more and the
    answer decides (``plan_settlement`` dead-letters a retry at the limit); those brokers'
    own max-delivery policies bound a crash loop. Elsewhere a count past the limit never
    comes from a stop (``plan_settlement`` releases a stop-cut last attempt) but from
    deliveries that ended unsettled (a crash, a lapsed lease): refusing bounds that loop.
    """
    if attempt > policy.max_attempts and not releases_counted:
        return Outcome.dead(f"max attempts ({policy.max_attempts}) exceeded before delivery")
    return None


def plan_settlement(
    outcome: Outcome,
    attempt: int,
    policy: RetryConfig,
    *,
    shutting_down: bool = False,
    dead_letter_enabled: bool = True,
    drop_handled: bool = False,
) -> Settlement:
    """The one settle for ``outcome`` of delivery ``attempt``.

    ``shutting_down``: the attempt was cut short by shutdown; it goes back at once and a
    retry then never turns into a dead letter (the app did not get to answer). A retry so cut
    short counts its attempt (the app had the message), but never past the limit: at its last
    attempt it goes back as a release, uncounted where the broker can (local, Redis,
    RabbitMQ), so its next delivery is still within ``max_attempts``, reaches the app and the
    answer decides; counted, that delivery would be past the limit and ``admit`` would
    dead-letter it unseen, for the stop alone.
    ``drop_handled``: the driver settles a drop itself (daprd's per-subscription
    dead-letter topics), else a drop goes where a dead letter goes.
    """
    kind, reason, status = outcome.kind, outcome.reason, outcome.http_status
    if kind is Kind.RELEASE:  # after the app's Retry-After, if it gave one
        delay_s = 0.0 if shutting_down else outcome.delay_s or 0.0
        return Settlement(kind, Verb.RELEASE, delay_s, reason, status)
    if kind is Kind.RETRY:
        if shutting_down and attempt >= policy.max_attempts:
            return Settlement(kind, Verb.RELEASE, 0.0, f"{reason}; {LAST_ATTEMPT_KEPT}", status)
        if shutting_down:
            return Settlement(kind, Verb.RETRY, 0.0, reason, status)
        if attempt < policy.max_attempts:
            return Settlement(kind, Verb.RETRY, policy.delay_for(attempt), reason, status)
        kind, reason = Kind.DEAD, f"max attempts ({policy.max_attempts}) reached; last: {reason}"
    if kind is Kind.DROP and outcome.discard:  # an operator's drop: gone, wherever dead go
        return Settlement(kind, Verb.ACK, 0.0, reason, status)
    if kind is Kind.DROP and drop_handled:
        return Settlement(kind, Verb.DROP, 0.0, reason, status)
    if kind in (Kind.DEAD, Kind.DROP) and dead_letter_enabled:
        # a drop lands in the dead-letter destination too when there is one, as in Dapr
        return Settlement(kind, Verb.DEAD_LETTER, 0.0, reason, status)
    # ack, and dead or drop without a destination: delete; the journal and log keep the trace
    return Settlement(kind, Verb.ACK, 0.0, reason, status)
