"""SQS's errors as the driver sees them: real botocore exceptions (a ``ClientError`` shaped as
SQS answers over the JSON and the query protocol, transport and credential errors) classified
into "try again" (``DriverUnavailable``), "the lease is gone" (``LeaseLost``) or a terminal
``DriverError``; per-entry errors of the batch calls; and the calls themselves against a
stubbed boto3 client (no network)."""

from __future__ import annotations

from collections.abc import Iterator

import botocore.exceptions
import pytest
from botocore.stub import Stubber

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.drivers.sqs.api import (
    MAX_VISIBILITY_S,
    SqsApi,
    entry_errors,
    is_missing_queue,
    map_error,
    whole_seconds,
)

URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"


def client_error(code: str, message: str = "", *, status: int = 400, query_code: str = "",
                 operation: str = "DeleteMessage") -> botocore.exceptions.ClientError:
    error: dict[str, str] = {"Code": code, "Message": message}
    if query_code:
        error["QueryErrorCode"] = query_code
    return botocore.exceptions.ClientError(
        {"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}},  # type: ignore[typeddict-item]
        operation,
    )


@pytest.mark.parametrize("code", [
    "RequestThrottled", "AWS.SimpleQueueService.RequestThrottled", "ThrottlingException",
    "ServiceUnavailable", "InternalError", "KMS.ThrottlingException",
])
def test_throttling_and_the_services_own_faults_are_worth_another_try(code: str) -> None:
    error = map_error(client_error(code, "slow down"), "ReceiveMessage")
    assert type(error) is DriverUnavailable
    assert error.retriable
    assert str(error) == f"SQS ReceiveMessage: {code}: slow down"


def test_any_5xx_is_worth_another_try_whatever_its_code() -> None:
    error = map_error(client_error("SomethingNew", status=503), "SendMessage")
    assert type(error) is DriverUnavailable


@pytest.mark.parametrize("code", [
    "ReceiptHandleIsInvalid", "InvalidReceiptHandle", "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
])
def test_a_stale_receipt_handle_means_the_lease_is_gone(code: str) -> None:
    assert type(map_error(client_error(code), "DeleteMessage", settling=True)) is LeaseLost


def test_a_query_error_code_counts_as_the_code_the_json_protocol_would_give() -> None:
    stale = client_error("InvalidParameterValue", query_code="ReceiptHandleIsInvalid")
    assert type(map_error(stale, "ChangeMessageVisibility", settling=True)) is LeaseLost


def test_an_invalid_receipt_handle_parameter_is_a_lost_lease_only_when_settling() -> None:
    expired = client_error(
        "InvalidParameterValue",
        "Value x for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.")
    assert type(map_error(expired, "ChangeMessageVisibility", settling=True)) is LeaseLost
    not_settling = map_error(expired, "SendMessage")
    assert type(not_settling) is DriverError
    assert not not_settling.retriable


def test_another_invalid_parameter_while_settling_stays_terminal() -> None:
    bad = client_error("InvalidParameterValue", "VisibilityTimeout must be at most 43200")
    error = map_error(bad, "ChangeMessageVisibility", settling=True)
    assert type(error) is DriverError
    assert not error.retriable


@pytest.mark.parametrize(("code", "query_code"), [
    ("AWS.SimpleQueueService.NonExistentQueue", ""),
    ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue"),
    ("NonExistentQueue", ""),
])
def test_a_missing_queue_is_terminal_and_said_plainly(code: str, query_code: str) -> None:
    exc = client_error(code, "The specified queue does not exist.", query_code=query_code)
    error = map_error(exc, "GetQueueUrl 'orders'")
    assert type(error) is DriverError
    assert str(error) == "SQS GetQueueUrl 'orders': queue does not exist"
    assert is_missing_queue(exc)


def test_is_missing_queue_reads_either_code_and_nothing_else() -> None:
    assert is_missing_queue(client_error("Whatever", query_code="QueueDoesNotExist"))
    assert not is_missing_queue(client_error("AccessDenied"))


def test_an_unknown_client_error_is_terminal_with_its_code_and_message() -> None:
    error = map_error(client_error("AccessDenied", "not allowed"), "SendMessage")
    assert type(error) is DriverError
    assert not error.retriable
    assert str(error) == "SQS SendMessage: AccessDenied: not allowed"


@pytest.mark.parametrize("exc", [
    botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    botocore.exceptions.ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"),
    botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
])
def test_transport_errors_are_worth_another_try(exc: Exception) -> None:
    assert type(map_error(exc, "ReceiveMessage")) is DriverUnavailable


@pytest.mark.parametrize("exc", [
    botocore.exceptions.NoCredentialsError(),
    botocore.exceptions.NoRegionError(),
    botocore.exceptions.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"),
])
def test_missing_credentials_or_region_are_terminal_and_say_where_they_come_from(
    exc: Exception,
) -> None:
    error = map_error(exc, "create client")
    assert type(error) is DriverError
    assert not error.retriable
    assert "standard AWS chain" in str(error)


def test_anything_else_is_terminal_and_named_by_its_type() -> None:
    error = map_error(ValueError("odd"), "ReceiveMessage")
    assert type(error) is DriverError
    assert str(error) == "SQS ReceiveMessage: ValueError: odd"


def test_batch_entries_get_their_own_errors_in_their_own_places() -> None:
    errors = entry_errors("DeleteMessageBatch", 4, [
        {"Id": "1", "Code": "ReceiptHandleIsInvalid", "Message": "gone", "SenderFault": True},
        {"Id": "3", "Code": "InternalError", "Message": "", "SenderFault": False},
    ])
    assert errors[0] is None
    assert errors[2] is None
    assert type(errors[1]) is LeaseLost
    assert type(errors[3]) is DriverUnavailable


def test_a_batch_entry_that_is_sqs_s_fault_is_worth_another_try_whatever_its_code() -> None:
    [error] = entry_errors("ChangeMessageVisibilityBatch", 1, [
        {"Id": "0", "Code": "SomethingNew", "SenderFault": False},
    ])
    assert type(error) is DriverUnavailable
    [error] = entry_errors("ChangeMessageVisibilityBatch", 1, [
        {"Id": "0", "Code": "SomethingNew", "SenderFault": True},
    ])
    assert type(error) is DriverError


@pytest.mark.parametrize(("seconds", "upper", "expected"), [
    (0.0, MAX_VISIBILITY_S, 0), (-3.0, MAX_VISIBILITY_S, 0), (1.0, MAX_VISIBILITY_S, 1),
    (1.2, MAX_VISIBILITY_S, 2), (29.9999999999, MAX_VISIBILITY_S, 30),
    (10**6, MAX_VISIBILITY_S, MAX_VISIBILITY_S), (25.0, 20, 20),
])
def test_whole_seconds_round_up_and_clamp(seconds: float, upper: int, expected: int) -> None:
    assert whole_seconds(seconds, upper=upper) == expected


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SqsApi, Stubber]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    api = SqsApi(region="eu-west-1", endpoint_url=None, max_connections=2,
                 connect_timeout_s=1.0)
    with Stubber(api.sqs) as stubber:
        yield api, stubber
        stubber.assert_no_pending_responses()
    api.close()


def test_a_settle_on_a_stale_handle_raises_lease_lost(stubbed: tuple[SqsApi, Stubber]) -> None:
    api, stubber = stubbed
    stubber.add_client_error("delete_message", service_error_code="ReceiptHandleIsInvalid",
                             service_message="gone", http_status_code=400)
    with pytest.raises(LeaseLost, match="SQS DeleteMessage: ReceiptHandleIsInvalid: gone"):
        api.delete(URL, "handle")


def test_a_receive_throttled_raises_driver_unavailable(stubbed: tuple[SqsApi, Stubber]) -> None:
    api, stubber = stubbed
    stubber.add_client_error("receive_message", service_error_code="RequestThrottled",
                             http_status_code=403)
    with pytest.raises(DriverUnavailable):
        api.receive(URL, max_messages=10, wait_s=0, visibility_s=30)


def test_a_missing_queue_on_lookup_is_terminal(stubbed: tuple[SqsApi, Stubber]) -> None:
    api, stubber = stubbed
    stubber.add_client_error("get_queue_url",
                             service_error_code="AWS.SimpleQueueService.NonExistentQueue",
                             http_status_code=400)
    with pytest.raises(DriverError, match="queue does not exist") as raised:
        api.queue_url("orders")
    assert type(raised.value) is DriverError


def test_delete_batch_answers_each_handle(stubbed: tuple[SqsApi, Stubber]) -> None:
    api, stubber = stubbed
    stubber.add_response(
        "delete_message_batch",
        {"Successful": [{"Id": "0"}],
         "Failed": [{"Id": "1", "Code": "ReceiptHandleIsInvalid", "SenderFault": True}]},
        {"QueueUrl": URL, "Entries": [{"Id": "0", "ReceiptHandle": "a"},
                                      {"Id": "1", "ReceiptHandle": "b"}]},
    )
    first, second = api.delete_batch(URL, ["a", "b"])
    assert first is None
    assert type(second) is LeaseLost


def test_release_goes_ten_at_a_time_and_returns_the_handles_refused(
    stubbed: tuple[SqsApi, Stubber],
) -> None:
    api, stubber = stubbed
    handles = [f"h{n}" for n in range(12)]
    stubber.add_response(
        "change_message_visibility_batch",
        {"Successful": [], "Failed": [{"Id": "4", "Code": "MessageNotInflight",
                                       "SenderFault": True}]},
        {"QueueUrl": URL, "Entries": [{"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": 0}
                                      for n, h in enumerate(handles[:10])]},
    )
    stubber.add_response(
        "change_message_visibility_batch",
        {"Successful": [], "Failed": [{"Id": "1", "Code": "InternalError",
                                       "SenderFault": False}]},
        {"QueueUrl": URL, "Entries": [{"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": 0}
                                      for n, h in enumerate(handles[10:])]},
    )
    assert api.release(URL, handles) == ["h4", "h11"]
