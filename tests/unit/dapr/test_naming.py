"""Names as Dapr's components derive them: snssqs keeps ``[a-zA-Z0-9_-]``, at most 80
characters, ``.fifo`` re-attached within them for FIFO; a per-topic queue is
``{consumerID}-{topic}``."""

from __future__ import annotations

import pytest

from priority_pubsub.dapr.naming import AWS_MAX_NAME, aws_sanitized, per_topic_queue


def test_only_letters_digits_underscore_and_dash_are_kept() -> None:
    names = ["orders", "shop.orders/high", "a_b-c", "ça va?"]
    assert [aws_sanitized(name) for name in names] == ["orders", "shopordershigh", "a_b-c", "ava"]


def test_a_long_name_is_cut_at_80() -> None:
    assert aws_sanitized("x" * 100) == "x" * AWS_MAX_NAME


@pytest.mark.parametrize("name", ["orders.fifo", "orders"])
def test_fifo_keeps_or_gets_its_suffix(name: str) -> None:
    assert aws_sanitized(name, fifo=True) == "orders.fifo"


def test_a_long_fifo_name_keeps_its_suffix_within_80() -> None:
    sanitized = aws_sanitized("y" * 100 + ".fifo", fifo=True)
    assert sanitized == "y" * (AWS_MAX_NAME - 5) + ".fifo"
    assert len(sanitized) == AWS_MAX_NAME


def test_the_fifo_suffix_of_a_standard_queue_is_not_kept_as_a_suffix() -> None:
    assert aws_sanitized("orders.fifo") == "ordersfifo"


def test_a_per_topic_queue_is_the_consumer_then_the_topic() -> None:
    assert per_topic_queue("checkout", "orders-high") == "checkout-orders-high"
