"""Blocking boto3 calls for the SQS driver, each wrapped into the project's error classes.

Everything here runs in the driver's worker threads, never on the event loop. Every method
raises only ``DriverError`` subclasses: botocore exceptions are classified once, at this
boundary, into "try again later" (``DriverUnavailable``: network, throttling, 5xx), "the lease
is gone" (``LeaseLost``: stale or invalid receipt handle) and terminal ``DriverError``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions

from priority_pubsub.core.errors import DriverError, DriverUnavailable, LeaseLost
from priority_pubsub.drivers.base import map_errors

if TYPE_CHECKING:
    from types_boto3_sns import SNSClient
    from types_boto3_sqs import SQSClient
    from types_boto3_sqs.type_defs import (
        BatchResultErrorEntryTypeDef,
        ChangeMessageVisibilityBatchRequestEntryTypeDef,
        DeleteMessageBatchRequestEntryTypeDef,
        MessageAttributeValueTypeDef,
        MessageTypeDef,
    )

MAX_VISIBILITY_S = 43_200
"""SQS's ceiling for one visibility timeout, and for a message's total since it was received."""
MAX_WAIT_TIME_S = 20
"""SQS's longest long poll."""
MAX_BATCH = 10
"""ReceiveMessage and every *Batch call take at most ten entries."""

_UNAVAILABLE = frozenset({
    "RequestThrottled", "AWS.SimpleQueueService.RequestThrottled", "Throttling",
    "ThrottlingException", "ThrottledException", "TooManyRequestsException",
    "ServiceUnavailable", "InternalError", "InternalFailure", "RequestTimeout",
    "KmsThrottled", "KMS.ThrottlingException",
})
_STALE_HANDLE = frozenset({
    "ReceiptHandleIsInvalid", "InvalidReceiptHandle", "MessageNotInflight",
    "AWS.SimpleQueueService.MessageNotInflight",
})
_NO_QUEUE = frozenset({
    "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue",
})
_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
)
_SETUP_ERRORS: tuple[type[Exception], ...] = (
    botocore.exceptions.NoCredentialsError,
    botocore.exceptions.PartialCredentialsError,
    botocore.exceptions.NoRegionError,
)

T = TypeVar("T")


def map_error(exc: Exception, action: str, *, settling: bool = False) -> DriverError:
    """The project error for a botocore exception raised by ``action``.

    ``settling`` marks calls that carry a receipt handle: there SQS's "invalid/expired handle"
    answers mean our lease is gone (``LeaseLost``), not that the request was malformed.
    """
    if isinstance(exc, botocore.exceptions.ClientError):
        error = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return _classify(action, str(error.get("Code", "")), str(error.get("Message", "")),
                         query_code=str(error.get("QueryErrorCode", "")),
                         server_fault=status >= 500, settling=settling)
    if isinstance(exc, _TRANSPORT_ERRORS):
        return DriverUnavailable(f"SQS {action}: {exc}")
    if isinstance(exc, _SETUP_ERRORS):
        return DriverError(
            f"SQS {action}: {exc} (credentials and region come from the standard AWS chain: "
            "AWS_* environment, ~/.aws, web identity or instance role; region also from "
            "driver.region)"
        )
    return DriverError(f"SQS {action}: {type(exc).__name__}: {exc}")


def _classify(action: str, code: str, message: str, *, query_code: str = "",
              server_fault: bool, settling: bool) -> DriverError:
    """One SQS error code (of a call, or of one entry of a batch call) as a project error."""
    text = f"SQS {action}: {code}: {message}".rstrip(": ")
    if code in _UNAVAILABLE or query_code in _UNAVAILABLE or server_fault:
        return DriverUnavailable(text)
    if code in _STALE_HANDLE or query_code in _STALE_HANDLE:
        return LeaseLost(text)
    if settling and code == "InvalidParameterValue" and "ReceiptHandle" in text:
        return LeaseLost(text)  # AWS: "...parameter ReceiptHandle is invalid... expired"
    if code in _NO_QUEUE or query_code in _NO_QUEUE:
        return DriverError(f"SQS {action}: queue does not exist")
    return DriverError(text)


def entry_errors(
    action: str, count: int, failed: Sequence[BatchResultErrorEntryTypeDef]
) -> list[DriverError | None]:
    """Per entry of a batch call whose entries were given ids "0".."count-1": its error, or
    None when SQS did it. ``SenderFault: false`` is SQS's side, so worth another try."""
    errors: list[DriverError | None] = [None] * count
    for entry in failed:
        errors[int(entry["Id"])] = _classify(
            action, entry.get("Code", ""), entry.get("Message", ""),
            server_fault=not entry.get("SenderFault", True), settling=True,
        )
    return errors


def is_missing_queue(exc: botocore.exceptions.ClientError) -> bool:
    """SQS's "no such queue" answer (its codes differ between the JSON and query APIs)."""
    error = exc.response.get("Error", {})
    return bool({str(error.get("Code", "")), str(error.get("QueryErrorCode", ""))} & _NO_QUEUE)


wrapped = functools.partial(
    map_errors, map_error,
    catch=(botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError),
)
"""``with wrapped(action):`` around a boto3 call: its errors come out as ``map_error`` says."""


def whole_seconds(seconds: float, *, upper: int = MAX_VISIBILITY_S) -> int:
    """SQS takes whole seconds: round up (a lease is never shorter than asked), clamp."""
    return max(0, min(upper, math.ceil(seconds - 1e-9)))


READ_MARGIN_S = 10.0


class SqsApi:
    """One boto3 SQS client (thread-safe) plus the few calls the driver makes."""

    def __init__(
        self,
        *,
        region: str | None,
        endpoint_url: str | None,
        max_connections: int,
        connect_timeout_s: float,
        longest_poll_s: float = MAX_WAIT_TIME_S,
    ) -> None:
        self._config = botocore.config.Config(
            max_pool_connections=max_connections,
            connect_timeout=connect_timeout_s,
            # A long poll holds the socket for up to ``longest_poll_s``; 10 s more is room
            # for a slow answer. Not more: a network that drops packets silently hangs every
            # call this long (and botocore tries 3 times).
            read_timeout=longest_poll_s + READ_MARGIN_S,
            retries={"mode": "standard", "max_attempts": 3},
        )
        self._region = region
        self._endpoint_url = endpoint_url
        self._sqs: SQSClient | None = None

    @property
    def sqs(self) -> SQSClient:
        if self._sqs is None:
            with wrapped("create client"):
                self._sqs = boto3.session.Session().client(
                    "sqs", region_name=self._region, endpoint_url=self._endpoint_url,
                    config=self._config,
                )
        return self._sqs

    def close(self) -> None:
        if self._sqs is not None:
            self._sqs.close()

    def queue_url(self, name: str) -> str:
        with wrapped(f"GetQueueUrl {name!r}"):
            return self.sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def receive(
        self, url: str, max_messages: int, wait_s: int, visibility_s: int
    ) -> list[MessageTypeDef]:
        with wrapped("ReceiveMessage"):
            answer = self.sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=max(1, min(MAX_BATCH, max_messages)),
                WaitTimeSeconds=max(0, min(MAX_WAIT_TIME_S, wait_s)),
                VisibilityTimeout=visibility_s,
                MessageSystemAttributeNames=[
                    "ApproximateReceiveCount", "SentTimestamp", "MessageGroupId",
                ],
                MessageAttributeNames=["All"],
            )
        return list(answer.get("Messages", []))

    def delete(self, url: str, handle: str) -> None:
        with wrapped("DeleteMessage", settling=True):
            self.sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)

    def change_visibility(self, url: str, handle: str, visibility_s: int) -> None:
        with wrapped("ChangeMessageVisibility", settling=True):
            self.sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=visibility_s
            )

    def delete_batch(self, url: str, handles: Sequence[str]) -> list[DriverError | None]:
        """One DeleteMessageBatch (at most ``MAX_BATCH``); each handle's own error or None."""
        entries: list[DeleteMessageBatchRequestEntryTypeDef] = [
            {"Id": str(n), "ReceiptHandle": h} for n, h in enumerate(handles)
        ]
        with wrapped("DeleteMessageBatch", settling=True):
            answer = self.sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        return entry_errors("DeleteMessageBatch", len(entries), answer.get("Failed", []))

    def change_visibility_batch(
        self, url: str, changes: Sequence[tuple[str, int]]
    ) -> list[DriverError | None]:
        """One ChangeMessageVisibilityBatch of (handle, seconds) pairs; each one's error."""
        entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
            {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": seconds}
            for n, (h, seconds) in enumerate(changes)
        ]
        with wrapped("ChangeMessageVisibilityBatch", settling=True):
            answer = self.sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
        return entry_errors("ChangeMessageVisibilityBatch", len(entries), answer.get("Failed", []))

    def release(self, url: str, handles: Sequence[str]) -> list[str]:
        """Make messages visible at once, ten per call; returns the handles SQS refused."""
        failed: list[str] = []
        for start in range(0, len(handles), MAX_BATCH):
            chunk = handles[start : start + MAX_BATCH]
            entries: list[ChangeMessageVisibilityBatchRequestEntryTypeDef] = [
                {"Id": str(n), "ReceiptHandle": h, "VisibilityTimeout": 0}
                for n, h in enumerate(chunk)
            ]
            with wrapped("ChangeMessageVisibilityBatch", settling=True):
                answer = self.sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
            failed += [chunk[int(f["Id"])] for f in answer.get("Failed", [])]
        return failed

    def send(
        self,
        url: str,
        body: str,
        attributes: Mapping[str, MessageAttributeValueTypeDef],
        *,
        group_id: str | None = None,
        dedup_id: str | None = None,
    ) -> str:
        extra: dict[str, Any] = {}
        if url.endswith(".fifo"):  # FIFO queues refuse sends without a group
            extra["MessageGroupId"] = group_id or "priority-pubsub"
            if dedup_id:
                extra["MessageDeduplicationId"] = dedup_id
        with wrapped("SendMessage"):
            answer = self.sqs.send_message(
                QueueUrl=url, MessageBody=body, MessageAttributes=dict(attributes), **extra
            )
        return answer["MessageId"]

    def attributes(self, url: str, names: Sequence[str]) -> dict[str, str]:
        with wrapped("GetQueueAttributes"):
            answer = self.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=list(names),  # type: ignore[arg-type]  # literal union in stubs
            )
        return {str(k): v for k, v in answer.get("Attributes", {}).items()}


def string_attributes(attributes: Mapping[str, str]) -> dict[str, MessageAttributeValueTypeDef]:
    return {k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()}


def call_sns(
    fn: Callable[[SNSClient], T], *, region: str | None, endpoint_url: str | None
) -> T:
    """Run ``fn`` with a short-lived SNS client (for the CLI's ``publish --via-sns``)."""
    with wrapped("SNS"):
        client = boto3.session.Session().client(
            "sns", region_name=region, endpoint_url=endpoint_url
        )
    try:
        with wrapped("SNS Publish"):
            return fn(client)
    finally:
        client.close()
