"""RabbitMQ's wire without a broker: a delivery's attempt (the driver's header plus
RabbitMQ's own count of returns), its attributes (the publisher's headers, Dapr's property
names, never the bookkeeping), a malformed header as a defect rather than an exception; what a
copy carries; and which client errors are worth another try."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any, cast

import aiormq
import pytest
from aio_pika.abc import AbstractIncomingMessage

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.drivers.rabbitmq.wire import (
    ATTEMPT_HEADER,
    ENQUEUED_HEADER,
    copy_of,
    map_error,
    read_delivery,
)

SENT = dt.datetime(2026, 11, 28, 7, 0, tzinfo=dt.UTC)


def delivery(headers: dict[str, Any] | None = None, *, redelivered: bool = False,
             **properties: Any) -> AbstractIncomingMessage:
    fields: dict[str, Any] = {
        "body": b'{"n": 1}', "headers": headers, "redelivered": redelivered, "timestamp": SENT,
        "message_id": "m1", "correlation_id": None, "type": None, "content_type": None,
        "content_encoding": None, "delivery_mode": None, "priority": None, "reply_to": None,
        "app_id": None}
    return cast(AbstractIncomingMessage, SimpleNamespace(**{**fields, **properties}))


def test_a_first_delivery_is_attempt_one_enqueued_when_it_was_sent() -> None:
    reading = read_delivery(delivery(), received_ms=5)
    assert (reading.id, reading.attempt, reading.defect) == ("m1", 1, None)
    assert reading.enqueued_ms == int(SENT.timestamp() * 1000)


def test_a_copys_attempt_header_plus_the_brokers_returns() -> None:
    assert read_delivery(delivery({ATTEMPT_HEADER: 3}), 0).attempt == 3
    assert read_delivery(delivery({ATTEMPT_HEADER: 3}, redelivered=True), 0).attempt == 4
    assert read_delivery(delivery({ATTEMPT_HEADER: b"3", "x-delivery-count": 2}), 0).attempt == 5


def test_attributes_are_the_publishers_headers_and_daprs_property_names() -> None:
    headers = {"tenant": "acme", "flag": True, "n": 7, "raw": b"bytes", "x-death": [{}],
               "x-delivery-count": 0, ATTEMPT_HEADER: 2, ENQUEUED_HEADER: 1000, "none": None}
    reading = read_delivery(delivery(headers, correlation_id="c1", type="order",
                                     content_type="application/json"), 0)
    assert reading.attributes == {
        "tenant": "acme", "flag": "true", "n": "7", "raw": "bytes", "messageid": "m1",
        "correlationid": "c1", "type": "order", "contenttype": "application/json"}
    assert reading.enqueued_ms == 1000


@pytest.mark.parametrize(("headers", "defect"), [
    ({ATTEMPT_HEADER: "soon"}, "is not an integer"),
    ({ATTEMPT_HEADER: 0}, "must be >= 1"),
    ({"x-delivery-count": "two"}, "is not a count"),
    ({"blob": b"\xff\xfe"}, "is not UTF-8 text or a scalar"),
    ({"nested": {"a": 1}}, "is not UTF-8 text or a scalar"),
])
def test_a_malformed_header_is_a_defect_not_an_exception(headers: dict[str, Any],
                                                          defect: str) -> None:
    reading = read_delivery(delivery(headers), 0)
    assert reading.defect is not None
    assert defect in reading.defect
    assert reading.attempt >= 1


def test_a_message_without_an_id_gets_one_from_its_content_stable_across_deliveries() -> None:
    first = read_delivery(delivery(message_id=None), 0).id
    assert first.startswith("sha256-")
    assert read_delivery(delivery(message_id=None, redelivered=True), 0).id == first
    assert read_delivery(delivery(message_id=None, body=b"other"), 0).id != first


def test_a_copy_carries_its_next_attempt_and_drops_the_brokers_headers() -> None:
    incoming = delivery({"tenant": "acme", "x-death": [{}], "x-delivery-count": 4,
                         ENQUEUED_HEADER: 1000}, correlation_id="c1")
    copy = copy_of(incoming, attempt=6, extra_headers={"x-priority-pubsub-renewal": "1"})
    assert copy.headers == {"tenant": "acme", ATTEMPT_HEADER: 6, ENQUEUED_HEADER: 1000,
                            "x-priority-pubsub-renewal": "1"}
    assert (copy.body, copy.message_id, copy.correlation_id) == (b'{"n": 1}', "m1", "c1")


@pytest.mark.parametrize("exc", [
    aiormq.exceptions.ChannelNotFoundEntity("no queue"),
    aiormq.exceptions.ChannelAccessRefused("refused"),
    aiormq.exceptions.ChannelPreconditionFailed("inequivalent arg"),
    aiormq.exceptions.ProbableAuthenticationError("bad login"),
])
def test_refusals_are_terminal_even_while_settling(exc: Exception) -> None:
    error = map_error(exc, "ack", settling=True)
    assert type(error) is DriverError
    assert not error.retriable


@pytest.mark.parametrize("exc", [aiormq.exceptions.ChannelInvalidStateError("closed"),
                                 aiormq.exceptions.AMQPConnectionError("gone")])
def test_a_lost_channel_while_settling_means_rabbitmq_requeued_it(exc: Exception) -> None:
    assert type(map_error(exc, "ack", settling=True)) is LeaseLost
    assert type(map_error(exc, "receive")) is DriverUnavailable


@pytest.mark.parametrize("exc", [ConnectionRefusedError("refused"), TimeoutError(),
                                 RuntimeError("closed")])
def test_network_failures_are_worth_another_try(exc: Exception) -> None:
    assert type(map_error(exc, "publish")) is DriverUnavailable


def test_anything_else_is_terminal() -> None:
    assert type(map_error(ValueError("odd"), "publish")) is DriverError
