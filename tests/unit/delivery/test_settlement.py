"""The settlement decisions, as pure functions: every settle the sidecar makes is one of these."""

from __future__ import annotations

import pytest

from priority_pubsub.core.outcome import Kind, Outcome
from priority_pubsub.delivery.settlement import (
    LAST_ATTEMPT_KEPT,
    Settlement,
    Verb,
    admit,
    plan_settlement,
)
from priority_pubsub.settings.config import RetryConfig

POLICY = RetryConfig(max_attempts=3, initial_delay_s=2, max_delay_s=5)


@pytest.mark.parametrize(
    ("outcome", "attempt", "expected"),
    [
        (Outcome.ack(200), 1, Settlement(Kind.ACK, Verb.ACK, 0.0, None, 200)),
        (Outcome.retry("503", 503), 1, Settlement(Kind.RETRY, Verb.RETRY, 2.0, "503", 503)),
        (Outcome.retry("503", 503), 2, Settlement(Kind.RETRY, Verb.RETRY, 4.0, "503", 503)),
        (Outcome.retry("503", 503), 3, Settlement(
            Kind.DEAD, Verb.DEAD_LETTER, 0.0, "max attempts (3) reached; last: 503", 503)),
        (Outcome.dead("fatal 422", 422), 1,
         Settlement(Kind.DEAD, Verb.DEAD_LETTER, 0.0, "fatal 422", 422)),
        (Outcome.drop("404", 404), 1, Settlement(Kind.DROP, Verb.DEAD_LETTER, 0.0, "404", 404)),
        (Outcome.release("surplus: returned unseen"), 5,
         Settlement(Kind.RELEASE, Verb.RELEASE, 0.0, "surplus: returned unseen")),
    ],
)
def test_plan_settlement(outcome: Outcome, attempt: int, expected: Settlement) -> None:
    assert plan_settlement(outcome, attempt, POLICY) == expected


@pytest.mark.parametrize(("attempt", "verb", "reason"), [
    (1, Verb.RETRY, "shutting down"),
    (2, Verb.RETRY, "shutting down"),
    # the last attempt, or past it where releases count (SQS, Pub/Sub, Service Bus): never
    # counted past the limit, where admit would dead-letter the next delivery unseen
    (3, Verb.RELEASE, f"shutting down; {LAST_ATTEMPT_KEPT}"),
    (5, Verb.RELEASE, f"shutting down; {LAST_ATTEMPT_KEPT}"),
])
def test_a_shutdown_returns_at_once_and_never_dead_letters(
    attempt: int, verb: Verb, reason: str
) -> None:
    planned = plan_settlement(Outcome.retry("shutting down"), attempt, POLICY,
                              shutting_down=True)
    assert planned == Settlement(Kind.RETRY, verb, 0.0, reason)
    if attempt <= POLICY.max_attempts:  # where the count is exact: delivered once more
        next_attempt = attempt + 1 if verb is Verb.RETRY else attempt
        assert admit(next_attempt, POLICY, releases_counted=False) is None


def test_a_shutdown_releases_what_the_app_never_saw_at_once() -> None:
    """Unseen, even past a Retry-After the release carried: the stop does not wait."""
    planned = plan_settlement(Outcome.release("unseen", delay_s=9), 3, POLICY,
                              shutting_down=True)
    assert planned == Settlement(Kind.RELEASE, Verb.RELEASE, 0.0, "unseen")


@pytest.mark.parametrize("outcome", [Outcome.dead("fatal"), Outcome.drop("404")])
def test_without_a_destination_it_deletes_but_says_what_it_was(outcome: Outcome) -> None:
    planned = plan_settlement(outcome, 1, POLICY, dead_letter_enabled=False)
    assert (planned.kind, planned.verb) == (outcome.kind, Verb.ACK)


def test_admit_refuses_past_the_limit_only_where_the_count_is_exact() -> None:
    assert admit(3, POLICY, releases_counted=False) is None
    refused = admit(4, POLICY, releases_counted=False)
    assert refused == Outcome.dead("max attempts (3) exceeded before delivery")
    # SQS, Pub/Sub, Service Bus: the excess may be releases the app never saw
    assert admit(4, POLICY, releases_counted=True) is None


def test_a_driver_that_settles_drops_itself_gets_the_drop() -> None:
    planned = plan_settlement(Outcome.drop("404", 404), 1, POLICY, drop_handled=True)
    assert planned == Settlement(Kind.DROP, Verb.DROP, 0.0, "404", 404)
